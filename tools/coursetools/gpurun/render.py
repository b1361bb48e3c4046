"""The report in Markdown: a headline that names what failed, what did not run and why, and what
was not validated."""

from __future__ import annotations

from .steps import REQUIRE_GPU_VAR

STRICT = f"{REQUIRE_GPU_VAR}=1 (no CPU fallback)"
HEADLINES = {
    "rehearsal": "REHEARSAL ON A CPU: not validated: no GPU ({lessons} lesson(s) ran; {would} "
    "claim(s) would have been checked on a GPU)",
    "failed": "FAILED: {problems} problem(s) (below)",
    "inconclusive": "INCONCLUSIVE: failures the machine explains (a broken torchvision, a small "
    "/dev/shm) or claims measured on a busy GPU (below)",
    "partial": "PASSED WHAT RAN; some parts NOT VALIDATED ON GPU or not run (below)",
    "passed": "PASSED: every lesson ({lessons}), claim ({claims}), gpu test and grading run passed",
}
VERDICTS = {
    "pass": "PASS",
    "false": "FAIL",
    "flaky": "FAIL, then PASS when run again: FLAKY",
    "busy": "FAIL on a busy GPU: INCONCLUSIVE",
}


def _cell(text) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def _table(title: str, head: str, rows: list[list]) -> list[str]:
    """A section: its title, then a table of ``head``'s columns ("a | b") and ``rows``."""
    lines = ["", f"## {title}", "", f"| {head} |", "|" + "---|" * (head.count(" | ") + 1)]
    return lines + [f"| {' | '.join(_cell(v) for v in row)} |" for row in rows]


def headline(report: dict) -> str:
    rows, skipped = report["notebooks"], report["skipped"]
    claims, would = (sum(len(r[key]) for r in rows) for key in ("claims", "would_check"))
    counts = dict(lessons=len(rows), claims=claims, would=would, problems=len(report["problems"]))
    tail = f"; NOT RUN: {len(skipped)} step(s) (below)" if skipped else ""
    return HEADLINES[report["status"]].format(**counts) + tail


def _environment_lines(report: dict) -> list[str]:
    """The machine and the tools, from the doctor's facts and the runner's versions."""
    facts, versions = report["facts"], report["versions"]
    driver, torch_ = facts.get("driver") or {}, facts.get("torch") or {}
    devices = torch_.get("devices") or []
    gpu = next((g for g in driver.get("gpus") or [] if devices and g.get("name") == devices[0]), {})

    def framework(key: str) -> str:
        info = facts.get(key) or {}
        if not info.get("installed"):
            return "not installed"
        seen = f", sees {info['gpus']} GPU(s)" if "gpus" in info else ""
        error = f" (error: {info['error']})" if info.get("error") else ""
        return f"{info.get('version')}{seen}{error}"

    strict = "off: a CPU rehearsal" if report["rehearsal"] else STRICT
    budget = f"{report['budget']:.0f} s" if report.get("budget") else "none"
    return [
        f"- device: {devices[0] if devices else None} (compute capability "
        f"{gpu.get('compute_capability')}, {gpu.get('memory_gib')} GiB; {len(devices)} visible to "
        f"PyTorch, {len(driver.get('gpus') or [])} on the machine, CUDA_VISIBLE_DEVICES="
        f"{facts.get('cuda_visible_devices')})",
        f"- NVIDIA driver {driver.get('version')} (CUDA {driver.get('cuda')}); PyTorch "
        f"{torch_.get('version')} (CUDA {torch_.get('cuda')}); TensorFlow: "
        f"{framework('tensorflow')}; DALI: {framework('dali')}",
        f"- Python {facts.get('python')} ({versions.get('executable')}) on "
        f"{facts.get('platform')}; pytest {versions.get('pytest')}, nbval {versions.get('nbval')}, "
        f"nbgrader {versions.get('nbgrader')}",
        f"- commit {versions.get('commit')}; {versions.get('date')}; budget {budget}; "
        f"{report['progress']}",
        f"- strict mode: {strict}; a false claim is recorded, its cell goes on, its lesson fails",
    ]


def _gpu_state_lines(report: dict) -> list[str]:
    rows = []
    for when in ("before", "after"):
        state = report.get(f"gpu_{when}") or {"error": "not read: the run stopped first"}
        if "error" in state:
            rows.append([when, state["error"], "", "", "", "", ""])
        for gpu in state.get("gpus", []):
            clocks = f"{gpu.get('sm_clock_mhz')} / {gpu.get('sm_clock_max_mhz')} MHz"
            name, used = f"{gpu['index']}: {gpu.get('name')}", f"{gpu.get('utilization_percent')}%"
            power, others = f"{gpu.get('power_limit_w')} W", len(gpu.get("processes") or [])
            rows.append([when, name, used, clocks, power, others, gpu.get("mig") or "-"])
    head = "when | GPU | utilisation | SM clock / max | power limit | other compute processes | MIG"
    busy = [f"- BUSY: {b}: a failed timing claim here is inconclusive" for b in report["busy"]]
    return _table("The GPU before and after", head, rows) + ([""] + busy if busy else [])


def _lesson_lines(report: dict) -> list[str]:
    rows, notes = [], []
    for row in report["notebooks"]:
        parts = []
        for name in ("PyTorch", "TensorFlow", "DALI"):
            part = row["parts"].get(name)
            why = f": {', '.join(part['not_validated'])}" if part and part["not_validated"] else ""
            parts.append(f"{part['result']}{why}" if part else "-")
        passed = sum(c["verdict"] == "pass" for c in row["claims"])
        claims = f"{passed}/{len(row['claims'])}" if row["claims"] else "-"
        rows.append([row["notebook"], row["result"], f"{row['seconds']} s", *parts, claims])
        if row["failed_cells"]:
            more = len(row["failed_cells"]) - 1
            later = f"and {more} later cell(s); " if more else ""
            first = f"first failure {row['failed_cells'][0]} ({later}log: {row['log']})"
            notes.append(f"\n{row['notebook']}: {first}")
        if row["machine_cause"]:
            notes.append(f"\n{row['notebook']}: the machine's problem: {row['machine_cause']}")
    title = "Lessons (`pytest --nbval-lax`, claims checked by `gpucourse.claims`)"
    head = "notebook | result | time | PyTorch part | TensorFlow part | DALI part | claims"
    return _table(title, head, rows) + notes


def _claim_lines(report: dict) -> list[str]:
    rows, claimed = report["notebooks"], []
    for row in rows:
        for c in row["claims"]:
            value = c["measured"]
            shown = f"{value:.4g}{c.get('unit') or ''}" if isinstance(value, (int, float)) else "-"
            cells = [c["claim"], shown, c["bound"], VERDICTS[c["verdict"]], c.get("source") or "-"]
            claimed.append([row["notebook"], *cells])
    head = "notebook | claim | measured | expected | result | source"
    lines = _table("Claims checked on the GPU", head, claimed) if claimed else []
    would = [f"- {row['notebook']}: {_cell(c)}" for row in rows for c in row["would_check"]]
    if would:
        lines += ["", "## Claims that would have been checked on a GPU (measured here on the CPU)"]
        lines += ["", *would]
    missing = [f"- {row['notebook']}: {_cell(c)}" for row in rows for c in row["claims_not_run"]]
    return lines + ["", "## Claims that did not run", "", *(missing or ["- none: every claim ran"])]


def _pytest_lines(report: dict) -> list[str]:
    """Grading on the GPU and the gpu tests, one row a run; the skipped and the machine's failures
    are listed under "Not validated on GPU"."""
    runs = {**report["grading"], "gpu-marked tests": report.get("gpu_tests")}
    runs = {label: part for label, part in runs.items() if part}
    rows = []
    for label, part in runs.items():
        counts = [part["passed"], *(len(part[k]) for k in ("failed", "machine", "skipped"))]
        rows.append([label, part["result"], *counts, part["seconds"], part["log"]])
    title = "Grading on the GPU (nbgrader autograde) and the gpu-marked tests"
    head = "run | result | passed | failed | the machine's | skipped | seconds | log"
    failed = [f"- {label}: FAILED {t}" for label, part in runs.items() for t in part["failed"]]
    return _table(title, head, rows) + ([""] + failed if failed else [])


def render_markdown(report: dict) -> str:
    lines = [f"# GPU test report: {headline(report)}", "", *_environment_lines(report)]
    lines += _gpu_state_lines(report)
    if report["machine"]:
        lines += ["", "## The machine's problems and gaps (not the lessons')", ""]
        lines += [f"- {p['problem']}. Fix: {p['fix']}." for p in report["machine"]]
    if report["problems"]:
        lines += ["", "## Problems", "", *[f"- {p}" for p in report["problems"]]]
    if report["skipped"]:
        lines += ["", "## Not run", "", *[f"- {s}" for s in report["skipped"]]]
    lines += _lesson_lines(report) + _claim_lines(report)
    lines += ["", "## Not validated on GPU", ""]
    lines += [
        f"- {item['what']}: {item['why']}"
        + (f" ({', '.join(item['where'])})" if item["where"] else "")
        for item in report["not_validated_on_gpu"]
    ] or ["- nothing: every part ran on the GPU"]
    lines += _pytest_lines(report)
    steps = [
        [s["id"], s["state"], s["seconds"] or "-", s["estimate"] or "-", s["why"] or ""]
        for s in report["steps"]
    ]
    lines += _table("Steps", "step | state | seconds | estimate | why", steps)
    return "\n".join(lines) + "\n"
