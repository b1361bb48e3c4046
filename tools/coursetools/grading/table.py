"""Grade a class: nbgrader autograde with each student's kernel in a sandbox, then the class table.

    python -m coursetools.grading NN_topic [--jobs N] [--unsandboxed]
    make grade LESSON=NN_topic [GRADE_JOBS=N] [UNSANDBOXED=1]

collects the lesson (when an exchange is configured), autogrades every submission in submitted/,
several at once, and prints one line per student: score, failed test cells, cells that timed out,
cells that killed the kernel, cells not run. nbgrader_config.py puts ``GradingExecute`` in place of
nbgrader's Execute, so a plain ``nbgrader autograde`` grades the same way; this command adds the
parallel runs, the times and the table.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from coursetools.grading.rows import (
    GRADED,
    NOT_GRADED,
    REPORTS,
    TIMES,
    UNREADABLE,
    ClassRows,
    class_rows,
    grading_times,
)
from coursetools.grading.sandbox import UNSANDBOXED, WHY, sandbox_problem

COLUMNS = ("failed", "timed_out", "kernel_died", "not_run")
FLAGGED = "an answer cell rebinds what the tests judge with: read it before trusting its score"
PROG = "python -m coursetools.grading"


def show(data: ClassRows) -> str:
    """The class table: a line per student; ranked by speed-up where the lesson measures one (lesson
    09)."""
    rows = data.rows
    # lesson 09: the class ranked by the speed-up each measured here
    timed = any(r.speedup for r in rows)
    if timed:
        rows = sorted(rows, key=lambda r: -(r.speedup or 0.0))
    header = f"{'student':<16} {'score':>24} {'seconds':>7}" + (
        f" {'speed-up':>8}" if timed else ""
    )
    lines = [header + "  failed cells | timeouts | kernel deaths | not run"]
    for r in rows:
        if r.status == GRADED:
            score = f"{r.score:g} / {r.max_score:g}" + (
                f" (+{r.waiting:g} by hand)" if r.waiting else ""
            )
            cells = " | ".join(", ".join(getattr(r, k)) or "-" for k in COLUMNS)
        else:
            score, cells = r.status, f"({r.why})" if r.why else ""
        seconds = "-" if r.seconds is None else f"{r.seconds:.0f}"
        ratio = (f" {r.speedup:>7.2f}x" if r.speedup else f" {'-':>8}") if timed else ""
        lines.append(f"{r.student:<16} {score:>24} {seconds:>7}{ratio}  {cells}")
    flagged = [f"  {r.student}: {flag}" for r in rows for flag in r.flags]
    if flagged:
        lines += [f"FLAGGED: {FLAGGED}", *flagged]
    return "\n".join(lines)


def _nbgrader(course: Path, *args: str) -> subprocess.CompletedProcess:
    env = dict(
        os.environ,
        PATH=os.pathsep.join([os.path.dirname(sys.executable), os.environ.get("PATH", "")]),
    )
    command = [sys.executable, "-m", "nbgrader", *args, "--log-level=WARN"]
    return subprocess.run(
        command, cwd=course, env=env, capture_output=True, text=True, stdin=subprocess.DEVNULL
    )


def grade(course: Path, lesson: str, *, jobs: int, extra: list[str]) -> ClassRows:
    """Autograde every submission of ``lesson`` in ``course``, ``jobs`` at a time; keep the times;
    the rows."""
    students = sorted(
        p.parent.name for p in (course / "submitted").glob(f"*/{lesson}") if p.is_dir()
    )

    failures: dict[str, str] = {}

    def one(student: str) -> tuple[str, float]:
        started = time.monotonic()
        args = ("autograde", lesson, "--student", student, "--force", *extra)
        result = _nbgrader(course, *args)
        # the gradebook's writes wait a minute for each other (grading.config); past that, once more
        if "database is locked" in result.stderr:
            result = _nbgrader(course, *args)
        if result.returncode != 0:
            failures[student] = why_failed(result.stderr)
            print(
                f"{student}: nbgrader autograde failed:\n{result.stderr[-2000:]}", file=sys.stderr
            )
        return student, time.monotonic() - started

    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        seconds = dict(pool.map(one, students))
    times = grading_times(course)  # kept for the class report
    times[lesson] = {**times.get(lesson, {}), **{s: round(t, 1) for s, t in seconds.items()}}
    (course / REPORTS).mkdir(exist_ok=True)
    (course / REPORTS / TIMES).write_text(json.dumps(times, indent=1, sort_keys=True) + "\n")
    data = class_rows(course, lesson)
    for row in data.rows:
        if row.status == NOT_GRADED and row.student in failures:
            row.why = failures[row.student]
    return data


def why_failed(stderr: str) -> str:
    """One line for the class table: why nbgrader autograde left a submission without a score."""
    if "database is locked" in stderr:
        return "the gradebook stayed locked by other graders: grade again with --jobs 1"
    lines = [line.strip() for line in stderr.splitlines() if line.strip()]
    return f"nbgrader autograde failed: {lines[-1][:120]}" if lines else "nbgrader autograde failed"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog=PROG, description=__doc__.splitlines()[0])
    parser.add_argument("lesson", help="the assignment, e.g. 02_tensors_on_device")
    jobs = os.cpu_count() or 1
    parser.add_argument(
        "--jobs", type=int, default=jobs, help="submissions graded at once (default: cores)"
    )
    parser.add_argument(
        "--course", type=Path, default=Path.cwd(), help="the course directory (default: here)"
    )
    parser.add_argument(
        "--unsandboxed", action="store_true", help="grade without the sandbox (trusted code only)"
    )
    parser.add_argument(
        "--no-collect", action="store_true", help="grade what is in submitted/, no collecting"
    )
    args, extra = parser.parse_known_args(argv)
    if not (args.course / "nbgrader_config.py").exists():
        parser.error(f"{args.course} is not the course directory (no nbgrader_config.py)")
    problem = None if args.unsandboxed else sandbox_problem()
    if problem:
        print(f"grade: refusing to grade {args.lesson}: {problem}.\n{WHY}", file=sys.stderr)
        return 2
    if args.unsandboxed:
        extra.append(UNSANDBOXED)
    if not args.no_collect:
        collected = _nbgrader(args.course, "collect", args.lesson)
        if collected.returncode != 0:
            said = collected.stderr.strip().splitlines()[-1:] or "no exchange"
            print(f"(nothing collected: {said}; grading what is in submitted/)", file=sys.stderr)
    started = time.monotonic()
    data = grade(args.course, args.lesson, jobs=args.jobs, extra=extra)
    print(show(data))
    took = time.monotonic() - started
    print(f"{len(data.rows)} submissions in {took:.0f} s, {args.jobs} at a time")
    unread = [r.student for r in data.rows if r.status == UNREADABLE]
    if unread:
        print(f"autograde could not read the submissions of {', '.join(unread)}", file=sys.stderr)
    return 0 if data.rows and all(r.status != NOT_GRADED for r in data.rows) else 1


if __name__ == "__main__":
    sys.exit(main())
