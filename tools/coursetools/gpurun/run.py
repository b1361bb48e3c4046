"""`make test-gpu`: the GPU runner's command line.

    python -m coursetools.gpurun                     # check the machine, run all: test-artifacts/
    python -m coursetools.gpurun --budget 540 --no-grading 09_make_it_fast  # within 9 minutes
    python -m coursetools.gpurun --budget 540 --no-lessons 09_make_it_fast  # its grading
    python -m coursetools.gpurun --preflight         # only the quick check (standard library only)
    python -m coursetools.gpurun --rehearse 01_verify_gpu   # on a CPU: "not validated: no GPU"
    python -m coursetools.gpurun --report-only DIR   # the report again, from what a run left in DIR
    python -m coursetools.gpurun --setup [--wheelhouse DIR] # add what the suite lacks, offline

The work runs in the order of its value: the chosen lessons, their grading, the gpu tests. With
--budget, a step whose estimate does not fit in what is left is not started, and one that runs past
the budget is stopped; the report (gpu-report.md, .json) is rewritten after every step, so a run
stopped at any moment leaves one that says what ran and what did not, and why. Exit status: 0 when
everything that ran passed (1 with --require-all if a part was not validated or not run), 1 when
something failed or could not be judged, 2 when nothing could run."""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from ..course import ROOT, lessons, solution_path
from . import gpustate, preflight, steps
from .catalogue import lesson_claims
from .render import render_markdown
from .report import build_report

RESERVE_S = 10  # kept for the last report and the GPU's state after the run
# A step's seconds, for the budget: a run reads them from its folder's last run.json; else these:
# a lesson, the H200's longest under nbval (09: 95.5 s); grading, the 2-core stand-in's longest (09:
# 202 s; on the H200, 09 and 06 graded side by side beside three lessons took over 230 s).
ESTIMATES = {"lesson": 100, "grading": 240, "grading the small assignment": 30, "gpu tests": 120}


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add = p.add_argument
    add("lessons", nargs="*", help="lessons to run, most valuable first (default: every one)")
    add("--preflight", action="store_true", help="only the quick check (standard library only)")
    add("--rehearse", action="store_true", help="a CPU rehearsal: no strict mode, no GPU needed")
    add("--artifacts", type=Path, default=ROOT / "test-artifacts", help="the report's folder")
    add("--budget", type=float, help="seconds for the whole run; what cannot fit is left out")
    add("--report-only", type=Path, metavar="DIR", help="rebuild the report from what DIR holds")
    add("--timeout", type=float, default=1800, help="seconds per step at most")
    add("--jobs", type=int, default=min(4, os.cpu_count() or 1), help="grading runs at once")
    add("--no-lessons", action="store_true", help="skip the lessons under nbval (grade only)")
    add("--no-grading", action="store_true", help="skip autograde on the GPU")
    add("--no-gpu-tests", action="store_true", help="skip the gpu-marked tests")
    add("--reruns", type=int, default=1, help="run a lesson again when a claim failed (flaky?)")
    add("--require-all", action="store_true", help="fail when a part is not validated or not run")
    add("--setup", action="store_true", help="add what the suite needs beside this PyTorch")
    add("--wheelhouse", help="with --setup: install offline, from this folder of wheels")
    add("--requirements", type=Path, help="with --setup: these (a file), not the suite's")
    return p


def plan(notebooks: list[Path], args, before: dict[str, float]) -> list[dict]:
    """Every step, in the order of its value, its estimate the last run's seconds (``before``)
    or a guess; what is not asked for is left out, with why."""
    no_gpu_tests = args.no_gpu_tests and "not run: not asked for (--no-gpu-tests)"
    skip = {
        "lesson": args.no_lessons and "not run: not asked for (--no-lessons)",
        "grading": args.no_grading and "not run: not asked for (--no-grading)",
        "gpu tests": "not run: no GPU: a CPU rehearsal" if args.rehearse else no_gpu_tests,
    }
    lessons = {nb.parent.name: str(nb.relative_to(ROOT)) for nb in notebooks}
    found = [("lesson", f"lesson {name}", name) for name in lessons]
    found += [("grading", "grading the small assignment", None)]
    found += [("grading", f"grading {name}", name) for name in lessons]
    found += [("gpu tests", "gpu tests", None)]
    planned = []
    for kind, name, lesson in found:
        why = skip.get(kind) or None
        estimate = before.get(name) or ESTIMATES.get(name) or ESTIMATES[kind]
        step = dict(id=name, kind=kind, lesson=lesson, estimate=estimate, why=why)
        planned.append({**step, "state": "left out" if why else "planned"})
        if kind == "lesson":
            planned[-1]["notebook"] = lessons[lesson]
    return planned


class Runner:
    """Runs the planned steps within the budget, writing the record and the report after each."""

    def __init__(self, run: dict, artifacts: Path, args):
        self.run, self.artifacts, self.args = run, artifacts, args
        self.lock = threading.RLock()

    def save(self) -> dict:
        with self.lock:
            return write(self.run, self.artifacts)

    def start(self, step: dict) -> float | None:
        """The step's time limit, or None (and why, in the step) when it cannot finish in time."""
        with self.lock:
            budget = self.run.get("budget")
            spent = time.time() - self.run["started"]
            left = budget - spent - RESERVE_S if budget else float("inf")
            if step["estimate"] > left:
                need = f"needs about {step['estimate']:.0f} s, {max(left, 0):.0f} s left"
                step.update(state="left out", why=f"not run: out of time ({need})")
                self.save()
                return None
            step.update(state="running", started=time.time())
            self.save()
            return min(self.args.timeout, left)

    def execute(self, step: dict) -> None:
        limit = self.start(step)
        if limit is None:
            print(f"{step['id']}: {step['why']}", flush=True)
            return
        name = step["id"].replace(" ", "-")
        step.update(junit=f"junit/{name}.xml", log=f"logs/{name}.log")
        (self.artifacts / step["junit"]).unlink(missing_ok=True)
        env = steps.child_env(self.run["rehearsal"])
        if step["kind"] in {"lesson", "rerun"}:
            step["claims"] = f"claims/{name}.jsonl"
            (self.artifacts / step["claims"]).unlink(missing_ok=True)
            env[steps.CLAIMS_VAR], env[steps.DEFER_VAR] = str(self.artifacts / step["claims"]), "1"
        command = steps.command(step, self.artifacts, limit)
        print(f"{step['id']} ...", flush=True)
        result = steps.execute(command, self.artifacts / step["log"], limit, env)
        with self.lock:
            out_of_time = result["timed_out"] and limit < self.args.timeout
            step.update(result, state="done", out_of_time=out_of_time)
            self.save()
        print(f"{step['id']}: exit {result['returncode']}, {result['seconds']} s", flush=True)

    def go(self) -> None:
        """Each planned step in turn; the grading steps several at a time; a lesson again when one
        of its claims failed (is the claim flaky or false?)."""
        todo, i = self.run["steps"], 0
        while i < len(todo):
            step, i = todo[i], i + 1
            if step["state"] != "planned":
                continue
            if step["kind"] == "grading":
                group = [s for s in todo if s["kind"] == "grading" and s["state"] == "planned"]
                with ThreadPoolExecutor(max(1, self.args.jobs)) as pool:
                    list(pool.map(self.execute, group))
                continue
            self.execute(step)
            claims = steps.read_claims(self.artifacts / step["claims"]) if "claims" in step else []
            checked = [e for e in claims if e["kind"] == "claim" and e.get("checked", True)]
            failed = [e for e in checked if not e["passed"]]
            if step["kind"] == "lesson" and self.args.reruns > 0 and failed:
                print("  a claim failed: the lesson runs again (is the claim flaky or false?)")
                again = {"id": f"rerun {step['lesson']}", "kind": "rerun", "state": "planned"}
                todo.insert(i, {**step, **again, "returncode": None, "seconds": None})


def load(run: dict, artifacts: Path) -> dict:
    """The record with what its steps left on disk: JUnit cases, claims, the lesson's code."""
    loaded = []
    for step in run["steps"]:
        step = dict(step)
        if step.get("junit"):
            step["cases"] = steps.parse_junit(artifacts / step["junit"])
        if step.get("claims"):
            step["claims"] = steps.read_claims(artifacts / step["claims"])
        if step.get("notebook") and (ROOT / step["notebook"]).exists():
            step["code"] = "\n".join(steps.code_cells(ROOT / step["notebook"]))
            step["parts"] = steps.cell_parts(ROOT / step["notebook"])
        loaded.append(step)
    return {**run, "steps": loaded}


def write(run: dict, artifacts: Path) -> dict:
    """run.json, gpu-report.json and gpu-report.md, each replaced whole (never left half)."""
    report = build_report(load(run, artifacts))
    texts = {
        "run.json": json.dumps(run, indent=1),
        "gpu-report.json": json.dumps(report, indent=2),
        "gpu-report.md": render_markdown(report),
    }
    for name, text in texts.items():
        part = artifacts / f".{name}.{os.getpid()}.{threading.get_ident()}"
        part.write_text(text + "\n", encoding="utf-8")
        os.replace(part, artifacts / name)
    return report


def verdict(report: dict, require_all: bool) -> int:
    partial = report["status"] == "partial" and require_all
    return 1 if report["status"] in {"failed", "inconclusive"} or partial else 0


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    if args.report_only:
        folder = args.report_only.resolve()
        report = write(json.loads((folder / "run.json").read_text(encoding="utf-8")), folder)
        print((folder / "gpu-report.md").read_text(encoding="utf-8"))
        return verdict(report, args.require_all)
    if args.setup:  # the course's pins are read here, never by the quick check
        from .wheels import setup

        return setup(args.wheelhouse, args.requirements)
    problem, doctor = (None if args.rehearse else preflight.quick_problem()), {}
    if problem is None and not args.preflight:
        doctor = steps.doctor_report()
        problem = None if args.rehearse else preflight.cuda_problem(doctor)
    if problem is not None:
        print(preflight.stop_message(problem), file=sys.stderr)
        return 2
    if args.preflight:
        return 0
    started = time.time()
    every = {lesson: solution_path(lesson) for lesson in lessons()}
    unknown = sorted(set(args.lessons) - set(every))
    if unknown:
        raise SystemExit(f"unknown lesson(s): {', '.join(unknown)}")
    notebooks = [every[name] for name in dict.fromkeys(args.lessons or every)]  # in value order
    artifacts = args.artifacts.resolve()
    for folder in ("logs", "junit", "claims"):
        (artifacts / folder).mkdir(parents=True, exist_ok=True)
    try:  # the steps the last run in this folder finished in time: their seconds
        last = json.loads((artifacts / "run.json").read_text(encoding="utf-8"))["steps"]
    except (OSError, ValueError, KeyError):
        last = []
    before = {
        s["id"]: s["seconds"] for s in last if s["state"] == "done" and not s.get("timed_out")
    }
    local = preflight.local_facts()
    machine = preflight.machine_problems(doctor) + preflight.machine_gaps(doctor, local)
    for item in machine:
        print(f"the machine's: {item['problem']}.", file=sys.stderr)
    no_gpu = {"error": "not read: a CPU rehearsal"}
    run = {
        "started": started,
        "budget": args.budget,
        "rehearsal": args.rehearse,
        "all_lessons": list(every),
        "facts": doctor.get("facts") or {},
        "versions": steps.versions(),
        "machine": machine,
        "gpu_before": no_gpu if args.rehearse else gpustate.gpu_state(),
        "catalogue": {nb.parent.name: lesson_claims(nb) for nb in notebooks},
        "steps": plan(notebooks, args, before),
    }
    runner = Runner(run, artifacts, args)

    def stopped(signum, _frame):
        for child in list(steps.RUNNING):
            steps.stop(child)
        run["stopped"] = f"stopped by {signal.Signals(signum).name} at {time.strftime('%H:%M:%S')}"
        runner.save()
        os._exit(1)

    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(signum, stopped)
    mode = "a CPU rehearsal, no strict mode" if args.rehearse else f"{steps.REQUIRE_GPU_VAR}=1"
    print(f"{mode}; {len(notebooks)} lesson(s); budget {args.budget or 'none'}; in {artifacts}")
    runner.save()
    runner.go()
    run["gpu_after"] = no_gpu if args.rehearse else gpustate.gpu_state()
    report = runner.save()
    print((artifacts / "gpu-report.md").read_text(encoding="utf-8"))
    return verdict(report, args.require_all)
