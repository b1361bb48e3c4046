"""A class report: what the class got right, what it got wrong, and with which error.

    python -m coursetools.grading.report NN_topic [--course DIR] [--out DIR]
    make report LESSON=NN_topic

after grading (`make grade LESSON=NN_topic`, or `nbgrader autograde`), writes reports/NN_topic.html,
one page that needs nothing else (its plot is embedded), and reports/NN_topic.csv, one row per
submission, both from ``class_rows`` (the rows the class table prints):

- the score distribution (a histogram) and the class's mean and median;
- each test cell: points, how many submissions passed it, and its most common failure messages (an
  error's first line, as the autograded notebooks show it, with how many submissions met it and
  who);
- the submissions autograde could not read (an empty file, not a notebook), apart from the failures;
- the cells that timed out, killed the kernel or were not run;
- the written answers still waiting for a person, a count per answer (nbgrader's
  `needs_manual_grade`);
- grading time per submission, as `make grade` measured it (absent after a plain `nbgrader
  autograde`), and beside it the speed-up a submission measured where the lesson prints one (lesson
  09; shown, never graded).
"""

from __future__ import annotations

import argparse
import base64
import csv
import html
import io
import statistics
import sys
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from coursetools.grading.rows import GRADED, NO_ERROR, REPORTS, UNREADABLE, ClassRows, class_rows

SHOWN_MESSAGES = 5  # the most common failure messages listed per test cell
SHOWN_NAMES = 3  # students named beside a message or a written answer
PROG = "python -m coursetools.grading.report"


@dataclass
class CellSummary:
    """How the class did on one test cell."""

    label: str
    points: float
    passed: int = 0
    submissions: int = 0
    failures: Counter = field(default_factory=Counter)  # message -> how many
    who: dict[str, list[str]] = field(default_factory=dict)  # message -> students


def cell_summaries(data: ClassRows) -> list[CellSummary]:
    """Per test cell, over the submissions autograde read."""
    out = []
    for test in data.tests:
        summary = CellSummary(test.label, test.points)
        for row in data.rows:
            if row.status != GRADED or test.label not in row.cells:
                continue
            summary.submissions += 1
            if test.label in row.failed:
                message = row.messages.get(test.label, NO_ERROR)
                summary.failures[message] += 1
                summary.who.setdefault(message, []).append(row.student)
            else:
                summary.passed += 1
        out.append(summary)
    return out


def waiting(data: ClassRows) -> dict[str, list[str]]:
    """Written answer -> the students whose answer still waits for a person (answers with none left
    out)."""
    found = {label: [r.student for r in data.rows if label in r.ungraded] for label in data.written}
    return {label: students for label, students in found.items() if students}


def histogram(data: ClassRows) -> bytes:
    """The score distribution of the submissions autograde read, as a PNG."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    scores, top = [r.score for r in data.rows if r.status == GRADED], data.max_score or 1
    fig, ax = plt.subplots(figsize=(7, 3.2), dpi=100)
    whole = float(top).is_integer() and top <= 40
    bins = [b - 0.5 for b in range(int(top) + 2)] if whole else 20
    ax.hist(
        scores, bins=bins, range=None if whole else (0, top), color="#4c72b0", edgecolor="white"
    )
    ax.set_xlim(-0.5, top + 0.5)
    ax.set_xlabel(f"score (of {top:g})")
    ax.set_ylabel("submissions")
    ax.yaxis.get_major_locator().set_params(integer=True)
    ax.set_title(f"{data.lesson}: {len(scores)} submissions graded")
    fig.tight_layout()
    out = io.BytesIO()
    fig.savefig(out, format="png")
    plt.close(fig)
    return out.getvalue()


def _table(header: list[str], rows: list[list]) -> str:
    cells = "".join(f"<th>{html.escape(h)}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{c}</td>" for c in row) + "</tr>" for row in rows)
    return f"<table><tr>{cells}</tr>{body}</table>"


def _names(names: list[str]) -> str:
    more = f" and {len(names) - SHOWN_NAMES} more" if len(names) > SHOWN_NAMES else ""
    return html.escape(", ".join(names[:SHOWN_NAMES]) + more)


def _failure_block(t: CellSummary) -> str:
    e = html.escape
    items = "".join(
        f"<li><b>{n}</b> &times; <code>{e(message)}</code> "
        f"<span class=who>({_names(t.who[message])})</span></li>"
        for message, n in t.failures.most_common(SHOWN_MESSAGES)
    )
    rest = len(t.failures) - SHOWN_MESSAGES
    items += (
        f"<li>and {rest} other messages (the CSV lists every failed cell)</li>" if rest > 0 else ""
    )
    return f"<h3><code>{e(t.label)}</code>: {sum(t.failures.values())} failed</h3><ol>{items}</ol>"


def _summary(data: ClassRows) -> str:
    scores = [r.score for r in data.rows if r.status == GRADED]
    if not scores:
        return "no graded submissions in the gradebook"
    unread = sum(r.status == UNREADABLE for r in data.rows)
    text = (
        f"{len(scores)} submissions graded; mean {statistics.mean(scores):.2f}, "
        f"median {statistics.median(scores):g} of {data.max_score:g} points"
    )
    return text + (f"; {unread} could not be read" if unread else "")


def _sections(data: ClassRows) -> dict[str, str]:
    e = html.escape
    tests = cell_summaries(data)
    test_rows = [
        [f"<code>{e(t.label)}</code>", f"{t.points:g}", f"{t.passed} / {t.submissions}"]
        + [f"{t.passed / t.submissions:.0%}" if t.submissions else "-"]
        for t in tests
    ]
    kinds = ("timed_out", "kernel_died", "not_run")
    incidents = [
        [e(r.student)] + [e(", ".join(getattr(r, k))) or "-" for k in kinds]
        for r in data.rows
        if any(getattr(r, k) for k in kinds)
    ]
    unread = [[e(r.student), e(r.why)] for r in data.rows if r.status == UNREADABLE]
    flagged = [[e(r.student), "<br>".join(e(f) for f in r.flags)] for r in data.rows if r.flags]
    answers = [
        [f"<code>{e(label)}</code>", f"{data.written[label]:g}", str(len(who)), _names(who)]
        for label, who in waiting(data).items()
    ]
    sped = any(r.speedup is not None for r in data.rows)  # lesson 09 prints its measured speed-up
    times = [
        [e(r.student), _score(r), "-" if r.seconds is None else f"{r.seconds:.0f}"]
        + ["-" if r.speedup is None else f"{r.speedup:.2f}x"] * sped
        for r in data.rows
    ]
    timed = [r.seconds for r in data.rows if r.seconds is not None]
    return {
        "tests": _table(["test cell", "points", "passed", "pass rate"], test_rows),
        "failures": "".join(_failure_block(t) for t in tests if t.failures)
        or "<p>No test cell failed.</p>",
        "unread": _table(["student", "what autograde found"], unread) if unread else "<p>None.</p>",
        "flagged": _table(["student", "where and what"], flagged) if flagged else "<p>None.</p>",
        "incidents": _table(["student", "timed out", "killed the kernel", "not run"], incidents)
        if incidents
        else "<p>None.</p>",
        "answers": _table(["written answer", "points", "waiting", "students"], answers)
        if answers
        else "<p>None: every written answer is graded.</p>",
        "waiting": str(sum(len(who) for who in waiting(data).values())),
        "time_note": f"{len(timed)} timed: median {statistics.median(timed):.0f} s, "
        f"longest {max(timed):.0f} s."
        if timed
        else "Not timed: the submissions were graded with a plain <code>nbgrader autograde</code>; "
        "<code>make grade</code> times each one.",
        "times": _table(
            ["student", "score", "seconds"] + ["speed-up (measured, not graded)"] * sped, times
        ),
    }


def _score(r) -> str:
    return f"{r.score:g} / {r.max_score:g}" if r.status == GRADED else r.status


STYLE = """body { font-family: system-ui, sans-serif; max-width: 60rem; margin: 2rem auto;
  padding: 0 1rem; }
table { border-collapse: collapse; margin: 0.5rem 0 1.5rem; }
th, td { border: 1px solid #ccc; padding: 0.25rem 0.6rem; text-align: left; vertical-align: top; }
th { background: #f3f3f3; } .who { color: #666; } img { max-width: 100%; }"""


def page(data: ClassRows, png: bytes) -> str:
    """The report as one HTML page (styles inline, the plot a data: URL)."""
    e, s = html.escape, _sections(data)
    plot = base64.b64encode(png).decode()
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{e(data.lesson)}: class report</title>
<style>
{STYLE}
</style></head><body>
<h1>{e(data.lesson)}: class report</h1>
<p id="summary">{e(_summary(data))}. Scores are nbgrader's (the gradebook), hand-graded answers
included;
{s["waiting"]} written answers still wait for a person (each counts 0 until graded).</p>
<h2>Score distribution</h2>
<img id="scores" alt="histogram of the class's scores" src="data:image/png;base64,{plot}">
<h2>Test cells</h2>
{s["tests"]}
<h2>Most common failures</h2>
{s["failures"]}
<h2>Flagged: answer cells that rebind what the tests judge with</h2>
<p>Read these before trusting their scores: an answer cell changed a read-only cell's function or
class, or a function of a module the tests read (a static read of the code; it flags, never
grades).</p>
{s["flagged"]}
<h2>Submissions autograde could not read</h2>
{s["unread"]}
<h2>Timeouts and kernel deaths</h2>
{s["incidents"]}
<h2>Written answers still ungraded</h2>
{s["answers"]}
<h2>Grading time per submission</h2>
<p>{s["time_note"]}</p>
{s["times"]}
</body></html>
"""


def csv_rows(data: ClassRows) -> list[dict]:
    """The CSV: one row per submission, one column per test cell (its score)."""
    out = []
    for r in data.rows:
        row = {
            "student": r.student,
            "status": r.status,
            "score": "" if r.score is None else r.score,
            "max_score": r.max_score,
            "grading_seconds": "" if r.seconds is None else round(r.seconds, 1),
            "speedup": "" if r.speedup is None else r.speedup,
            "failed": " ".join(r.failed),
            "ungraded": " ".join(r.ungraded),
            "timed_out": " ".join(r.timed_out),
            "kernel_died": " ".join(r.kernel_died),
            "not_run": " ".join(r.not_run),
            "flags": "; ".join(r.flags),
        }
        row.update({t.label: r.cells.get(t.label, "") for t in data.tests})
        out.append(row)
    return out


def write(course: Path, lesson: str, out: Path | None = None) -> tuple[Path, Path, ClassRows]:
    """Write ``out``/LESSON.html and .csv (``out`` defaults to the course's reports/); their paths
    and the rows."""
    data = class_rows(course, lesson)
    out = out or course / REPORTS
    out.mkdir(parents=True, exist_ok=True)
    page_path, csv_path = out / f"{lesson}.html", out / f"{lesson}.csv"
    page_path.write_text(page(data, histogram(data)))
    table = csv_rows(data)
    header = list(table[0]) if table else ["student", "status", "score", "max_score"]
    with csv_path.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=header)
        writer.writeheader()
        writer.writerows(table)
    return page_path, csv_path, data


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog=PROG, description=__doc__.splitlines()[0])
    parser.add_argument("lesson", help="the assignment, e.g. 02_tensors_on_device")
    parser.add_argument(
        "--course", type=Path, default=Path.cwd(), help="the course directory (default: here)"
    )
    parser.add_argument(
        "--out", type=Path, help="where the page and the CSV go (default: the course's reports/)"
    )
    args = parser.parse_args(argv)
    grade_first = f"grade first (make grade LESSON={args.lesson})"
    if not (args.course / "gradebook.db").exists():
        parser.error(f"no gradebook.db in {args.course}: {grade_first}")
    data = class_rows(args.course, args.lesson)
    if not data.tests and not any(r.status != "not graded" for r in data.rows):
        parser.error(f"the gradebook has no assignment {args.lesson}: {grade_first}")
    page_path, csv_path, data = write(args.course, args.lesson, args.out)
    passed = ", ".join(f"{t.label} {t.passed}/{t.submissions}" for t in cell_summaries(data))
    count = len(data.rows)
    print(
        f"{count} submissions of {args.lesson} (passed: {passed}); wrote {page_path} and {csv_path}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
