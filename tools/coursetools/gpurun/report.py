"""The report as plain data, built from what ran, one small rule at a time. Pure: tested on faked
runs.

A lesson's result is the worst of its parts' (PyTorch, TensorFlow, DALI): failed > timeout > machine
(its failure is the machine's: a missing package, a small /dev/shm) > inconclusive (a claim failed
on a busy GPU) > not validated (a part this machine could not exercise, or no GPU at all) > passed.
A false claim is told apart from a flaky one (it passed when its lesson ran again) and from one
measured on a busy GPU."""

from __future__ import annotations

import re

from . import catalogue as claims_catalogue
from .gpustate import busy_reasons
from .needs import need_status, unmet_needs
from .runs import NEEDS

ORDER = ["failed", "timeout", "machine", "inconclusive", "not validated", "passed"]
MISSING_MODULE = re.compile(r"No module named '([\w.]+)'")


def _claim_line(entry: dict) -> str:
    measured = entry.get("measured")
    value = (
        f"{measured:.3g}{entry.get('unit') or ''}, " if isinstance(measured, (int, float)) else ""
    )
    return f"{entry.get('claim')}: {value}expected {entry.get('bound')}"


def _classify_claims(nb: dict, busy: list[str]) -> list[dict]:
    """Each claim checked on the GPU, with its verdict: pass, false, flaky (passed when run again),
    busy."""
    again = {
        e.get("claim"): e for e in (nb.get("rerun") or {}).get("claims", []) if e["kind"] == "claim"
    }
    out = []
    for e in nb.get("claims", []):
        if e["kind"] != "claim" or not e.get("checked", True):
            continue
        verdict = "pass" if e.get("passed") else "false"
        if verdict == "false" and busy:
            verdict = "busy"
        elif verdict == "false" and (again.get(e.get("claim")) or {}).get("passed"):
            verdict = "flaky"
        keys = ("claim", "measured", "unit", "bound", "passed", "device", "source")
        out.append({**{k: e.get(k) for k in keys}, "verdict": verdict})
    return out


def _machine_cause(nb: dict, bad: list[dict], machine: list[dict]) -> str | None:
    """The machine's reason for a lesson's failed cells, when there is one: a missing package, a
    problem the preflight found whose part of the machine the lesson's code uses."""
    for case in bad:
        found = MISSING_MODULE.search(case.get("message") or "")
        if found:
            return f"the package {found.group(1).split('.')[0]} is missing on this machine"
    code = nb.get("code", "")
    for problem in machine:
        if any(n in code for n in problem.get("needles", [])):
            if any(re.search(problem.get("symptoms") or "$^", c.get("message") or "") for c in bad):
                return f"{problem['problem']} (fix: {problem['fix']})"
    return None


def lesson_row(nb: dict, status: dict, facts: dict, run: dict) -> dict:
    """One lesson: its parts' results, its claims and verdicts, the claims that did not run."""
    parts_of_cells = nb.get("parts") or []
    entries = claims_catalogue_for(nb, run)
    cases = nb.get("cases", [])
    bad = [c for c in cases if c["outcome"] in {"failed", "error"}]
    claims = _classify_claims(nb, run.get("busy") or [])
    unchecked = [  # measured on a CPU (a rehearsal); measured None: its measurement did not happen
        e
        for e in nb.get("claims", [])
        if e["kind"] == "claim" and not e.get("checked", True) and e.get("measured") is not None
    ]
    ran, not_run = claims_catalogue.match(entries, [*claims, *unchecked])
    unmet = unmet_needs(nb, status, run.get("rehearsal", False))
    if "claims" in nb.get("uses", []) and entries and not ran and not run.get("rehearsal"):
        unmet.append(("PyTorch", NEEDS["claims"][1], "none ran on the GPU: no claim was recorded"))
    machine = _machine_cause(nb, bad, run.get("machine") or [])
    parts = {}
    for part in dict.fromkeys(["PyTorch", *parts_of_cells, *(p for p, _, _ in unmet)]):
        cells = [c for c in bad if _part_of_case(c, parts_of_cells) == part]
        mine = [c for c in claims if claims_catalogue.part_of(entries, c["claim"]) == part]
        why = [f"{what} ({reason})" for p, what, reason in unmet if p == part]
        verdicts = {c["verdict"] for c in mine}
        if cells:
            result = "machine" if machine else "failed"
        elif verdicts & {"false", "flaky"}:
            result = "failed"
        elif "busy" in verdicts:
            result = "inconclusive"
        else:
            result = "not validated" if why else "passed"
        parts[part] = {
            "result": result,
            "not_validated": why,
            "failed_cells": len(cells),
            "claims": f"{sum(c['verdict'] == 'pass' for c in mine)}/{len(mine)}",
        }
    results = [p["result"] for p in parts.values()]
    if nb.get("timed_out"):
        results.append("timeout")
    if nb.get("returncode") != 0 and not bad and not nb.get("timed_out") or not cases:
        results.append("failed")  # pytest failed outside any cell, or nothing ran
    return {
        "notebook": nb["notebook"],
        "lesson": nb.get("lesson"),
        "seconds": nb.get("seconds"),
        "result": min(results, key=ORDER.index),
        "parts": parts,
        "cells": len(cases),
        "failed_cells": [f"{c['name']}: {c['message']}" for c in bad],
        "machine_cause": machine,
        "claims": claims,
        "failed_claims": [_claim_line(c) for c in claims if c["verdict"] != "pass"],
        "would_check": [_claim_line(e) for e in unchecked],
        "claims_not_run": [e["text"] for e in not_run],
        "not_validated_on_gpu": [f"{what} ({why})" for _, what, why in unmet],
        "log": nb.get("log"),
        "_unmet": [(what, why) for _, what, why in unmet],
    }


def claims_catalogue_for(nb: dict, run: dict) -> list[dict]:
    return (run.get("catalogue") or {}).get(nb.get("lesson") or "", [])


def _part_of_case(case: dict, parts: list[str]) -> str:
    found = re.fullmatch(r"Cell (\d+)", case.get("name", ""))
    index = int(found.group(1)) if found else -1
    return parts[index] if 0 <= index < len(parts) else "PyTorch"


def pytest_part(result: dict | None, label: str, not_validated: list[dict]) -> dict | None:
    """A pytest run's summary (gpu tests, grading); a skipped test is not validated on the GPU."""
    if result is None:
        return None
    cases = result.get("cases", [])
    failed = [f"{c['id']}: {c['message']}" for c in cases if c["outcome"] in {"failed", "error"}]
    skipped = [c for c in cases if c["outcome"] == "skipped"]
    passed = sum(c["outcome"] == "passed" for c in cases)
    ok = result.get("returncode") == 0 and not result.get("timed_out") and passed > 0
    if result.get("timed_out"):
        failed.append(f"the {label} timed out")
    elif not cases:
        failed.append(f"no {label} ran (pytest exit status {result.get('returncode')})")
    for c in skipped:
        not_validated.append(
            {"what": f"{label}: {c['id']}", "why": f"skipped: {c['message']}", "where": []}
        )
    return {
        "result": "passed" if ok and not failed else "failed",
        "passed": passed,
        "failed": failed,
        "skipped": [f"{c['id']}: {c['message']}" for c in skipped],
        "seconds": result.get("seconds"),
        "cases": [{k: c[k] for k in ("name", "outcome", "seconds", "message")} for c in cases],
        "log": result.get("log"),
    }


def skipped_parts(rows: list[dict], run: dict, gpu_tests, grading) -> list[str]:
    """What was not run at all: lessons left out of a subset, grading, the gpu tests."""
    skipped = []
    ran = {row["lesson"] for row in rows}
    left_out = [name for name in run.get("all_lessons") or [] if name not in ran]
    if left_out:
        skipped.append(
            f"{len(left_out)} of {len(run['all_lessons'])} lessons not run ({', '.join(left_out)})"
        )
    if grading is None:
        skipped.append(
            f"grading on the GPU not run ({run.get('grading_skipped') or 'not asked for'})"
        )
    if gpu_tests is None:
        skipped.append(f"gpu tests not run ({run.get('gpu_tests_skipped') or 'not asked for'})")
    return skipped


def problems_of(rows: list[dict], facts: dict, parts: dict, bench: dict | None) -> list[str]:
    problems = []
    for row in rows:
        if row["result"] in {"failed", "timeout"}:
            false = [c for c in row["claims"] if c["verdict"] in {"false", "flaky"}]
            why = f" (claim {false[0]['verdict']}: {_claim_line(false[0])})" if false else ""
            problems.append(f"{row['notebook']}: {row['result']}{why}")
    tf = facts.get("tensorflow") or {}
    if (
        facts.get("course_set") == "gpu"
        and tf.get("installed")
        and not tf.get("error")
        and not tf.get("gpus")
    ):
        problems.append(
            "TensorFlow sees no GPU, though the GPU set installs its CUDA libraries: "
            "`python -m gpucourse doctor`"
        )
    problems += [
        f"{label}: failed" for label, part in parts.items() if part and part["result"] != "passed"
    ]
    if bench is not None and "error" in bench:
        problems.append(f"bench: {bench['error'][-300:]}")
    return problems


def build_report(
    facts: dict,
    notebooks: list[dict],
    gpu_tests: dict | None,
    bench: dict | None,
    versions: dict | None = None,
    grading: dict | None = None,
    run: dict | None = None,
) -> dict:
    """The report from the runs' results. ``notebooks``: runs.run_lesson's results (a "rerun" of the
    lesson where a claim failed); ``gpu_tests``, ``grading``: run_pytest's results, None when not
    run; ``run``: what was asked and seen: all_lessons, catalogue, machine (preflight problems),
    gpu_before/gpu_after, rehearsal, grading_skipped, gpu_tests_skipped."""
    from .render import environment

    run = dict(run or {})
    run["busy"] = busy_reasons(run.get("gpu_before")) + [
        f"after the run: {r}" for r in busy_reasons(run.get("gpu_after")) if "MIG" not in r
    ]
    status = need_status(facts)
    rows = [lesson_row(nb, status, facts, run) for nb in notebooks]
    unvalidated: dict[tuple[str, str], list[str]] = {}
    for row in rows:
        for key in row.pop("_unmet"):
            unvalidated.setdefault(key, []).append(row["notebook"])
    not_validated = [{"what": w, "why": y, "where": where} for (w, y), where in unvalidated.items()]
    parts = {
        "gpu tests": pytest_part(gpu_tests, "gpu test", not_validated),
        "grading on the GPU": pytest_part(grading, "grading on the GPU", not_validated),
    }
    problems = problems_of(rows, facts, parts, bench)
    skipped = skipped_parts(rows, run, gpu_tests, grading)
    results = {row["result"] for row in rows}
    if problems:
        overall = "failed"
    elif results & {"machine", "inconclusive"}:
        overall = "inconclusive"
    elif run.get("rehearsal"):
        overall = "rehearsal"
    else:
        overall = "partial" if not_validated or skipped else "passed"
    return {
        "status": overall,
        "problems": problems,
        "skipped": skipped,
        "busy": run["busy"],
        "machine": run.get("machine") or [],
        "environment": environment(facts, versions or {}),
        "gpu_before": run.get("gpu_before"),
        "gpu_after": run.get("gpu_after"),
        "notebooks": rows,
        "gpu_tests": parts["gpu tests"],
        "grading": parts["grading on the GPU"],
        "not_validated_on_gpu": not_validated,
        "bench": bench,
        "rehearsal": bool(run.get("rehearsal")),
    }
