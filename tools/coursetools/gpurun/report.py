"""The report as plain data, built from a run's record (run.json, with what its steps left), one
small rule at a time. Pure: tested on faked runs; `--report-only` rebuilds it from a folder.

A lesson's result is the worst of its parts' (PyTorch, TensorFlow, DALI): failed > timeout >
machine (a failure the machine's problem explains) > inconclusive (a claim failed on a busy GPU) >
not validated (a part this machine lacks the library or the GPUs for, or no GPU at all) > passed.
A false claim is told apart from a flaky one (it passed when its lesson ran again), and a step the
budget or a stop left out reads "not run" with why, never passed and never failed."""

from __future__ import annotations

import re

from . import catalogue
from .gpustate import busy_reasons

ORDER = ["failed", "timeout", "machine", "inconclusive", "not validated", "passed"]
NO_GPU = "no GPU: a CPU rehearsal"
# A gap a lesson states itself with claims.needs ("two GPUs", "a C compiler"): said once.
STATED = {"a C compiler": "compiler", "two GPUs": "gpus", "DALI's TensorFlow plugin": "plugin"}


def _claim_line(entry: dict) -> str:
    value, unit = entry.get("measured"), entry.get("unit") or ""
    shown = f"{value:.3g}{unit}, " if isinstance(value, (int, float)) else ""
    return f"{entry.get('claim')}: {shown}expected {entry.get('bound')}"


def explained(message: str, code: str | None, machine: list[dict]) -> dict | None:
    """The machine's problem or gap a failure's message shows, among those the code uses (None:
    a grading or gpu test, whose code is the whole course)."""
    for found in machine:
        uses = code is None or not found.get("needles") or any(n in code for n in found["needles"])
        if uses and re.search(found.get("symptoms") or "$^", message or "", flags=re.I):
            return found
    return None


def _unmet(step: dict, machine: list[dict], rehearsal: bool) -> list[tuple[str, str, str]]:
    """(part, what, why) of this lesson's GPU path the machine could not exercise: the gaps its
    code uses, and the preconditions it stated itself (claims.needs), said once."""
    stated = []
    for e in step.get("claims", []):
        if e["kind"] == "precondition" and not e.get("met") and e.get("checked", True):
            what = e.get("what") or "?"
            part = next((p for p in ("TensorFlow", "DALI") if p in what), "PyTorch")
            stated.append((part, what, e.get("why") or "not met on this machine"))
    said = " ".join(what.lower() for _, what, _ in stated)
    found = [
        (g["part"], g["code"], g["problem"].split(": ", 1)[-1])
        for g in machine
        if g["kind"] == "gap"
        and any(n in step.get("code", "") for n in g["needles"])
        and not (g["code"] in STATED and STATED[g["code"]] in said)
    ]
    return found + stated + ([("PyTorch", "the GPU path", NO_GPU)] if rehearsal else [])


def lesson_row(step: dict, rerun: dict | None, run: dict) -> dict:
    """One lesson: its parts' results, its claims and verdicts, the claims that did not run."""
    machine, code = run.get("machine") or [], step.get("code", "")
    cell_part = {f"Cell {i}": part for i, part in enumerate(step.get("parts") or [])}
    entries = (run.get("catalogue") or {}).get(step["lesson"], [])
    cases = step.get("cases", [])
    bad = [c for c in cases if c["outcome"] in {"failed", "error"}]
    again = {e.get("claim") for e in (rerun or {}).get("claims", []) if e.get("passed")}
    made = [e for e in step.get("claims", []) if e["kind"] == "claim"]
    claims = []  # each claim checked on the GPU: pass, false, flaky (passed when run again), busy
    for e in made:
        if e.get("checked", True):
            verdict = "busy" if run.get("busy") else "flaky" if e.get("claim") in again else "false"
            claims.append({**e, "verdict": "pass" if e.get("passed") else verdict})
    unchecked = [e for e in made if not e.get("checked", True) and e.get("measured") is not None]
    ran, not_run = catalogue.match(entries, [*claims, *unchecked])
    unmet = _unmet(step, machine, run.get("rehearsal", False))
    if entries and not ran and not run.get("rehearsal") and "claims.claim(" in code:
        unmet.append(("PyTorch", "the lesson's GPU claims", "none ran on the GPU"))
    causes = {c["name"]: explained(c.get("message", ""), code, machine) for c in bad}
    for name, cause in causes.items():
        if cause and cause["kind"] == "gap":
            why = f"{name} failed: {cause['problem']}"
            unmet.append((cell_part.get(name, "PyTorch"), cause["code"], why))
    parts = {}
    for part in dict.fromkeys(["PyTorch", *cell_part.values(), *(p for p, _, _ in unmet)]):
        cells = [c for c in bad if cell_part.get(c["name"], "PyTorch") == part]
        problems = [causes[c["name"]] for c in cells]
        why = list(dict.fromkeys(f"{what} ({reason})" for p, what, reason in unmet if p == part))
        verdicts = {c["verdict"] for c in claims if catalogue.part_of(entries, c["claim"]) == part}
        if any(p is None for p in problems) or verdicts & {"false", "flaky"}:
            result = "failed"
        elif any(p["kind"] == "problem" for p in problems):
            result = "machine"
        elif "busy" in verdicts:
            result = "inconclusive"
        else:
            result = "not validated" if why else "passed"
        parts[part] = {"result": result, "not_validated": why}
    results = [p["result"] for p in parts.values()]
    if step.get("timed_out"):
        results.append("timeout")
    if step.get("returncode") != 0 and not bad and not step.get("timed_out") or not cases:
        results.append("failed")  # pytest failed outside any cell, or nothing ran
    problem = next((c for c in causes.values() if c and c["kind"] == "problem"), None)
    return {
        "notebook": step["notebook"],
        "lesson": step["lesson"],
        "seconds": step.get("seconds"),
        "result": min(results, key=ORDER.index),
        "parts": parts,
        "cells": len(cases),
        "failed_cells": [f"{c['name']}: {c['message']}" for c in bad],
        "machine_cause": problem and f"{problem['problem']} (fix: {problem['fix']})",
        "claims": claims,
        "would_check": [_claim_line(e) for e in unchecked],
        "claims_not_run": [e["text"] for e in not_run],
        "not_validated_on_gpu": [{"what": what, "why": why} for _, what, why in unmet],
        "log": step.get("log"),
    }


def pytest_part(step: dict, label: str, machine: list[dict], not_validated: list[dict]) -> dict:
    """A pytest run's summary (the gpu tests, a lesson's grading): a skipped test, a part a grading
    test says it could not judge here, and a failure the machine explains are not validated."""
    cases, failed, machines, said = step.get("cases", []), [], [], []
    for c in cases:
        said += [(item, "this machine") for item in c.get("not_validated") or []]
        if c["outcome"] == "skipped":
            said.append((c["id"], c["message"]))
        if c["outcome"] in {"failed", "error"}:
            cause = explained(c["message"], None, machine)
            (machines if cause else failed).append(f"{c['id']}: {c['message']}")
            if cause:
                said.append((c["id"], f"the machine's: {cause['problem']}"))
    not_validated += [{"what": f"{label}: {what}", "why": why, "where": []} for what, why in said]
    if step.get("timed_out"):
        failed.append(f"the {label} timed out")
    elif not cases:
        failed.append(f"no {label} ran (pytest exit status {step.get('returncode')})")
    passed = sum(c["outcome"] == "passed" for c in cases)
    return {
        "result": "failed" if failed else "not validated" if machines else "passed",
        "passed": passed,
        "failed": failed,
        "machine": machines,
        "skipped": [f"{c['id']}: {c['message']}" for c in cases if c["outcome"] == "skipped"],
        "seconds": step.get("seconds"),
        "log": step.get("log"),
    }


def not_run(step: dict) -> str | None:
    """Why a step did not run, or did not finish; None when it finished."""
    if step["state"] == "left out":
        return step["why"]
    if step["state"] == "planned":
        return "not run: out of time (the run stopped before it)"
    if step["state"] == "running" or step.get("out_of_time"):
        return "not finished: out of time (the run stopped during it)"
    return None


def build_report(run: dict) -> dict:
    """The report from a run's record: ``run["steps"]`` (each with its cases, claims, code and
    parts loaded), facts, versions, machine (problems and gaps), GPU states, catalogue."""
    run = dict(run)
    run["busy"] = busy_reasons(run.get("gpu_before")) + [
        r for r in busy_reasons(run.get("gpu_after"), "after the run") if "MIG" not in r
    ]
    steps, machine = run.get("steps") or [], run.get("machine") or []
    rows, graded, skipped, not_validated = [], {}, [], []
    unvalidated: dict[tuple[str, str], list[str]] = {}
    gpu_tests = None
    for step in steps:
        why = not_run(step)
        if why:
            skipped.append(f"{step['id']}: {why}")
        elif step["kind"] == "lesson":
            rerun = next((s for s in steps if s["id"] == f"rerun {step['lesson']}"), None)
            rows.append(lesson_row(step, rerun if rerun and not not_run(rerun) else None, run))
            for item in rows[-1]["not_validated_on_gpu"]:
                unvalidated.setdefault((item["what"], item["why"]), []).append(step["notebook"])
        elif step["kind"] == "grading":
            label = f"grading {step['lesson'] or 'the small assignment'}"
            graded[label] = pytest_part(step, label, machine, not_validated)
        elif step["kind"] == "gpu tests":
            gpu_tests = pytest_part(step, "gpu tests", machine, not_validated)
    asked = {s["lesson"] for s in steps if s["kind"] == "lesson"}
    left = [name for name in run.get("all_lessons") or [] if name not in asked]
    if left:
        said = f"{len(left)} of {len(run['all_lessons'])} lessons not run (not asked for)"
        skipped.insert(0, f"{said}: {', '.join(left)}")
    not_validated[:0] = [{"what": w, "why": y, "where": n} for (w, y), n in unvalidated.items()]
    problems = []
    for row in rows:
        if row["result"] in {"failed", "timeout"}:
            false = [c for c in row["claims"] if c["verdict"] in {"false", "flaky"}]
            why = f" (claim {false[0]['verdict']}: {_claim_line(false[0])})" if false else ""
            problems.append(f"{row['notebook']}: {row['result']}{why}")
    parts = {**graded, "gpu tests": gpu_tests}
    problems += [f"{k}: failed" for k, p in parts.items() if p and p["result"] == "failed"]
    results = {row["result"] for row in rows}
    if problems:
        status = "failed"
    elif results & {"machine", "inconclusive"}:
        status = "inconclusive"
    elif run.get("rehearsal"):
        status = "rehearsal"
    else:
        status = "partial" if not_validated or skipped else "passed"
    done = sum(not not_run(s) for s in steps)
    stopped = f"; {run['stopped']}" if run.get("stopped") else ""
    return {
        **{key: run.get(key) for key in ("budget", "busy", "gpu_before", "gpu_after")},
        **{key: run.get(key) or {} for key in ("facts", "versions")},
        "status": status,
        "problems": problems,
        "skipped": skipped,
        "progress": f"{done} of {len(steps)} steps finished{stopped}",
        "machine": machine,
        "notebooks": rows,
        "grading": graded,
        "gpu_tests": gpu_tests,
        "not_validated_on_gpu": not_validated,
        "steps": [
            {k: s.get(k) for k in ("id", "state", "seconds", "estimate", "why")} for s in steps
        ],
        "rehearsal": bool(run.get("rehearsal")),
    }
