"""The report in Markdown: a headline that names what failed, what did not run and why, and what
was not validated."""

from __future__ import annotations

from .steps import REQUIRE_GPU_VAR

VERDICTS = {
    "pass": "PASS",
    "false": "FAIL",
    "flaky": "FAIL, then PASS when run again: FLAKY",
    "busy": "FAIL on a busy GPU: INCONCLUSIVE",
}


def environment(facts: dict, versions: dict) -> dict:
    driver, torch_ = facts.get("driver") or {}, facts.get("torch") or {}
    devices = torch_.get("devices") or []
    gpu = next((g for g in driver.get("gpus") or [] if devices and g.get("name") == devices[0]), {})

    def framework(key: str) -> str:
        info = facts.get(key) or {}
        if not info.get("installed"):
            return "not installed"
        seen = f", sees {info['gpus']} GPU(s)" if "gpus" in info else ""
        return f"{info.get('version')}{seen}" + (
            f" (error: {info['error']})" if info.get("error") else ""
        )

    return {
        "device": devices[0] if devices else None,
        "gpus_visible": len(devices),
        "compute_capability": gpu.get("compute_capability"),
        "memory_gib": gpu.get("memory_gib"),
        "gpus_on_machine": len(driver.get("gpus") or []),
        "driver": driver.get("version"),
        "driver_cuda": driver.get("cuda"),
        "torch": torch_.get("version"),
        "torch_cuda": torch_.get("cuda"),
        "tensorflow": framework("tensorflow"),
        "dali": framework("dali"),
        "python": facts.get("python"),
        "platform": facts.get("platform"),
        "cuda_visible_devices": facts.get("cuda_visible_devices"),
        **versions,
    }


def _cell(text) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def headline(report: dict) -> str:
    rows, skipped, status = report["notebooks"], report["skipped"], report["status"]
    tail = f"; NOT RUN: {len(skipped)} step(s) (below)" if skipped else ""
    if status == "rehearsal":
        would = sum(len(r["would_check"]) for r in rows)
        return (
            f"REHEARSAL ON A CPU: not validated: no GPU ({len(rows)} lesson(s) ran; {would} "
            f"claim(s) would have been checked on a GPU){tail}"
        )
    if status == "failed":
        return f"FAILED: {len(report['problems'])} problem(s) (below){tail}"
    if status == "inconclusive":
        return (
            "INCONCLUSIVE: failures the machine explains (a broken torchvision, a small /dev/shm)"
            f" or claims measured on a busy GPU (below){tail}"
        )
    if status == "partial":
        return f"PASSED WHAT RAN; some parts NOT VALIDATED ON GPU or not run (below){tail}"
    claims = sum(len(r["claims"]) for r in rows)
    return f"PASSED: every lesson ({len(rows)}), claim ({claims}), gpu test and grading run passed"


def _environment_lines(report: dict) -> list[str]:
    env = report["environment"]
    strict = (
        "off: a CPU rehearsal" if report["rehearsal"] else f"{REQUIRE_GPU_VAR}=1 (no CPU fallback)"
    )
    budget = f"{report['budget']:.0f} s" if report.get("budget") else "none"
    return [
        f"- device: {env.get('device')} (compute capability {env.get('compute_capability')}, "
        f"{env.get('memory_gib')} GiB; {env.get('gpus_visible')} visible to PyTorch, "
        f"{env.get('gpus_on_machine')} on the machine, CUDA_VISIBLE_DEVICES="
        f"{env.get('cuda_visible_devices')})",
        f"- NVIDIA driver {env.get('driver')} (CUDA {env.get('driver_cuda')}); PyTorch "
        f"{env.get('torch')} (CUDA {env.get('torch_cuda')}); TensorFlow: {env.get('tensorflow')}; "
        f"DALI: {env.get('dali')}",
        f"- Python {env.get('python')} ({env.get('executable')}) on {env.get('platform')}; pytest "
        f"{env.get('pytest')}, nbval {env.get('nbval')}, nbgrader {env.get('nbgrader')}",
        f"- commit {env.get('commit')}; {env.get('date')}; budget {budget}; {report['progress']}",
        f"- strict mode: {strict}; a false claim is recorded, its cell goes on, its lesson fails",
    ]


def _gpu_state_lines(report: dict) -> list[str]:
    lines = ["", "## The GPU before and after", "", "| when | GPU | utilisation | SM clock / max "]
    lines[-1] += "| power limit | other compute processes | MIG |"
    lines.append("|---|---|---|---|---|---|---|")
    for when in ("before", "after"):
        state = report.get(f"gpu_{when}") or {"error": "not read: the run stopped first"}
        if "error" in state:
            lines.append(f"| {when} | {_cell(state['error'])} | | | | | |")
        for gpu in state.get("gpus", []):
            clocks = f"{gpu.get('sm_clock_mhz')} / {gpu.get('sm_clock_max_mhz')} MHz"
            lines.append(
                f"| {when} | {gpu['index']}: {_cell(gpu.get('name'))} | "
                f"{gpu.get('utilization_percent')}% | {clocks} | {gpu.get('power_limit_w')} W | "
                f"{len(gpu.get('processes') or [])} | {gpu.get('mig') or '-'} |"
            )
    busy = [f"- BUSY: {b}: a failed timing claim here is inconclusive" for b in report["busy"]]
    return lines + ([""] + busy if busy else [])


def _lesson_lines(report: dict) -> list[str]:
    lines = ["", "## Lessons (`pytest --nbval-lax`, claims checked by `gpucourse.claims`)", ""]
    lines += ["| notebook | result | time | PyTorch part | TensorFlow part | DALI part | claims |"]
    lines += ["|---|---|---|---|---|---|---|"]
    for row in report["notebooks"]:
        parts = []
        for name in ("PyTorch", "TensorFlow", "DALI"):
            part = row["parts"].get(name)
            why = f": {', '.join(part['not_validated'])}" if part and part["not_validated"] else ""
            parts.append(_cell(f"{part['result']}{why}") if part else "-")
        claims = f"{sum(c['verdict'] == 'pass' for c in row['claims'])}/{len(row['claims'])}"
        lines.append(
            f"| {row['notebook']} | {row['result']} | {row['seconds']} s | {' | '.join(parts)} | "
            f"{claims if row['claims'] else '-'} |"
        )
    for row in report["notebooks"]:
        if row["failed_cells"]:
            more = len(row["failed_cells"]) - 1
            later = f"and {more} later cell(s); " if more else ""
            first = f"first failure {row['failed_cells'][0]} ({later}log: {row['log']})"
            lines.append(f"\n{row['notebook']}: {first}")
        if row["machine_cause"]:
            lines.append(f"\n{row['notebook']}: the machine's problem: {row['machine_cause']}")
        lines += [f"\n{row['notebook']}: claim FAILED: {claim}" for claim in row["failed_claims"]]
    return lines


def _claim_lines(report: dict) -> list[str]:
    rows, lines = report["notebooks"], []
    claimed = [(row["notebook"], c) for row in rows for c in row["claims"]]
    if claimed:
        lines += ["", "## Claims checked on the GPU", ""]
        lines += ["| notebook | claim | measured | expected | result | source |"]
        lines += ["|---|---|---|---|---|---|"]
        for notebook, c in claimed:
            value = c["measured"]
            shown = f"{value:.4g}{c.get('unit') or ''}" if isinstance(value, (int, float)) else "-"
            lines.append(
                f"| {notebook} | {_cell(c['claim'])} | {shown} | {_cell(c['bound'])} | "
                f"{VERDICTS[c['verdict']]} | {_cell(c.get('source') or '-')} |"
            )
    would = [f"- {row['notebook']}: {_cell(c)}" for row in rows for c in row["would_check"]]
    if would:
        lines += ["", "## Claims that would have been checked on a GPU (measured here on the CPU)"]
        lines += ["", *would]
    missing = [f"- {row['notebook']}: {_cell(c)}" for row in rows for c in row["claims_not_run"]]
    return lines + ["", "## Claims that did not run", "", *(missing or ["- none: every claim ran"])]


def _part_lines(title: str, part: dict) -> list[str]:
    counts = f"{part['passed']} passed, {len(part['failed'])} failed, {len(part['machine'])} the "
    counts += (
        f"machine's, {len(part['skipped'])} skipped in {part['seconds']} s (log: {part['log']})"
    )
    lines = ["", f"## {title}: {part['result']}", "", counts]
    lines += [f"- FAILED {t}" for t in part["failed"]]
    lines += [f"- the machine's, not validated: {t}" for t in part["machine"]]
    return lines + [f"- skipped {t}" for t in part["skipped"]]


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
    for label, part in report["grading"].items():
        lines += _part_lines(f"{label[0].upper()}{label[1:]} (nbgrader autograde)", part)
    if report.get("gpu_tests"):
        lines += _part_lines("gpu-marked tests", report["gpu_tests"])
    bench = report.get("bench")
    if bench and "rows" in bench:
        lines += [
            "",
            f"## Bench: {bench.get('name')} ({bench.get('known_as') or 'no peaks known'})",
        ]
        lines += ["", "| measurement | value | peak | of peak |", "|---|---|---|---|"]
        for row in bench["rows"]:
            value = "-" if row["value"] is None else f"{row['value']:.4g} {row['unit']}"
            ratio = "-" if row["ratio"] is None else f"{row['ratio']:.0%}"
            lines.append(f"| {row['what']} | {value} | {row['peak'] or '-'} | {ratio} |")
    lines += [
        "",
        "## Steps",
        "",
        "| step | state | seconds | estimate | why |",
        "|---|---|---|---|---|",
    ]
    lines += [
        f"| {s['id']} | {s['state']} | {s['seconds'] or '-'} | {s['estimate'] or '-'} | "
        f"{_cell(s['why'] or '')} |"
        for s in report["steps"]
    ]
    return "\n".join(lines) + "\n"
