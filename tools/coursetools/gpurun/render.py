"""The report in Markdown: a headline that names what failed, what was skipped and what was not
validated."""

from __future__ import annotations

from .runs import REQUIRE_GPU_VAR

VERDICTS = {
    "pass": "PASS",
    "false": "FAIL",
    "flaky": "FAIL, then PASS when run again: FLAKY",
    "busy": "FAIL on a busy GPU: INCONCLUSIVE",
}


def environment(facts: dict, versions: dict) -> dict:
    driver, torch_ = facts.get("driver") or {}, facts.get("torch") or {}
    devices = torch_.get("devices") or []
    gpu = next(
        (g for g in driver.get("gpus") or [] if devices and g.get("name") == devices[0]), None
    )

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
        "compute_capability": gpu and gpu.get("compute_capability"),
        "memory_gib": gpu and gpu.get("memory_gib"),
        "gpus_on_machine": len(driver.get("gpus") or []),
        "driver": driver.get("version"),
        "driver_cuda": driver.get("cuda"),
        "torch": torch_.get("version"),
        "torch_cuda": torch_.get("cuda"),
        "cudnn": torch_.get("cudnn"),
        "tensorflow": framework("tensorflow"),
        "dali": framework("dali"),
        "dali_tf_plugin": facts.get("dali_tf_plugin"),
        "c_compiler": facts.get("c_compiler"),
        "python": facts.get("python"),
        "platform": facts.get("platform"),
        "gpucourse": facts.get("gpucourse"),
        "cuda_visible_devices": facts.get("cuda_visible_devices"),
        **versions,
    }


def _cell(text) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def headline(report: dict) -> str:
    rows, skipped = report["notebooks"], report["skipped"]
    claims = sum(len(r["claims"]) for r in rows)
    tail = f"; NOT RUN: {'; '.join(skipped)}" if skipped else ""
    status = report["status"]
    if status == "rehearsal":
        would = sum(len(r["would_check"]) for r in rows)
        return (
            f"REHEARSAL ON A CPU: not validated: no GPU ({len(rows)} lesson(s) ran; {would} "
            "claim(s) "
            f"would have been checked on a GPU){tail}"
        )
    if status == "failed":
        return f"FAILED: {len(report['problems'])} problem(s) (below){tail}"
    if status == "inconclusive":
        return (
            "INCONCLUSIVE: failures that are the machine's (a missing package, a small /dev/shm) "
            "or "
            f"claims measured on a busy GPU (below){tail}"
        )
    if status == "partial":
        return f"PASSED WHAT RAN; some parts NOT VALIDATED ON GPU or not run (below){tail}"
    return (
        f"PASSED: every lesson ({len(rows)}), claim ({claims}), gpu test and grading run passed on "
        "the GPU"
    )


def _environment_lines(env: dict) -> list[str]:
    return [
        f"- device: {env.get('device')} (compute capability {env.get('compute_capability')}, "
        f"{env.get('memory_gib')} GiB; {env.get('gpus_visible')} visible to PyTorch, "
        f"{env.get('gpus_on_machine')} on the machine, "
        f"CUDA_VISIBLE_DEVICES={env.get('cuda_visible_devices')})",
        f"- NVIDIA driver {env.get('driver')} (CUDA {env.get('driver_cuda')}); PyTorch "
        f"{env.get('torch')} "
        f"(CUDA {env.get('torch_cuda')}, cuDNN {env.get('cudnn')})",
        f"- TensorFlow: {env.get('tensorflow')}; DALI: {env.get('dali')}; DALI's TensorFlow "
        "plugin: "
        f"{'installed' if env.get('dali_tf_plugin') else 'not installed'}; C compiler: "
        f"{env.get('c_compiler')}",
        f"- Python {env.get('python')} ({env.get('executable')}) on {env.get('platform')}; "
        "gpucourse "
        f"{env.get('gpucourse')}, pytest {env.get('pytest')}, nbval {env.get('nbval')}, "
        f"nbgrader {env.get('nbgrader')}",
        f"- commit {env.get('commit')}; {env.get('date')}",
    ]


def _gpu_state_lines(report: dict) -> list[str]:
    lines = ["", "## The GPU before and after", ""]
    states = [
        (when, report.get(key)) for when, key in (("before", "gpu_before"), ("after", "gpu_after"))
    ]
    if not any(state for _, state in states):
        return [*lines, "- not read (no NVML on this machine)"]
    lines += [
        "| when | GPU | utilisation | SM clock / max | power limit | other compute processes | "
        "MIG |",
        "|---|---|---|---|---|---|---|",
    ]
    for when, state in states:
        if not state or "error" in state:
            lines.append(f"| {when} | not read: {_cell((state or {}).get('error'))} | | | | | |")
            continue
        for gpu in state.get("gpus", []):
            lines.append(
                f"| {when} | {gpu['index']}: {_cell(gpu.get('name'))} | "
                f"{gpu.get('utilization_percent')}% | "
                f"{gpu.get('sm_clock_mhz')} / {gpu.get('sm_clock_max_mhz')} MHz | "
                f"{gpu.get('power_limit_w')} W "
                f"| {len(gpu.get('processes') or [])} | {gpu.get('mig') or '-'} |"
            )
    busy = report.get("busy") or []
    lines += (
        ["", *(f"- BUSY: {b}: a failed timing claim here is inconclusive" for b in busy)]
        if busy
        else []
    )
    return lines


def _lesson_lines(report: dict) -> list[str]:
    lines = [
        "",
        "## Lessons (`pytest --nbval-lax`, claims checked by `gpucourse.claims`)",
        "",
        "| notebook | result | time | PyTorch part | TensorFlow part | DALI part | claims passed |",
        "|---|---|---|---|---|---|---|",
    ]
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
            later = (
                f" (and {more} later cell(s); log: {row['log']})"
                if more
                else f" (log: {row['log']})"
            )
            lines.append(f"\n{row['notebook']}: first failure {row['failed_cells'][0]}{later}")
        if row["machine_cause"]:
            lines.append(
                f"\n{row['notebook']}: the machine's problem, not the lesson's: "
                f"{row['machine_cause']}"
            )
        lines += [f"\n{row['notebook']}: claim FAILED: {claim}" for claim in row["failed_claims"]]
    return lines


def _claim_lines(report: dict) -> list[str]:
    lines = []
    claimed = [(row["notebook"], c) for row in report["notebooks"] for c in row["claims"]]
    if claimed:
        lines += [
            "",
            "## Claims checked on the GPU",
            "",
            "| notebook | claim | measured | expected | result | source |",
            "|---|---|---|---|---|---|",
        ]
        for notebook, c in claimed:
            value = c["measured"]
            measured = (
                f"{value:.4g}{c.get('unit') or ''}" if isinstance(value, (int, float)) else "-"
            )
            lines.append(
                f"| {notebook} | {_cell(c['claim'])} | {measured} | {_cell(c['bound'])} | "
                f"{VERDICTS[c['verdict']]} | {_cell(c.get('source') or '-')} |"
            )
    would = [(row["notebook"], c) for row in report["notebooks"] for c in row["would_check"]]
    if would:
        lines += [
            "",
            "## Claims that would have been checked on a GPU (measured here on the CPU)",
            "",
        ]
        lines += [f"- {notebook}: {_cell(c)}" for notebook, c in would]
    missing = [(row["notebook"], c) for row in report["notebooks"] for c in row["claims_not_run"]]
    lines += ["", "## Claims that did not run", ""]
    lines += [f"- {notebook}: {_cell(c)}" for notebook, c in missing] or ["- none: every claim ran"]
    return lines


def render_markdown(report: dict) -> str:
    lines = [
        f"# GPU test report: {headline(report)}",
        "",
        *_environment_lines(report["environment"]),
    ]
    strict = (
        "off: a CPU rehearsal"
        if report.get("rehearsal")
        else f"{REQUIRE_GPU_VAR}=1 (no CPU fallback)"
    )
    lines += [
        f"- strict mode: {strict}; a false claim is recorded, its cell goes on, its lesson fails"
    ]
    lines += _gpu_state_lines(report)
    if report["machine"]:
        lines += ["", "## The machine's problems (not the lessons')", ""]
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
    for key, title in (
        ("grading", "Grading on the GPU (nbgrader autograde, expected scores)"),
        ("gpu_tests", "gpu-marked tests"),
    ):
        part = report.get(key)
        if part:
            lines += [
                "",
                f"## {title}: {part['result']}",
                "",
                f"{part['passed']} passed, {len(part['failed'])} failed, {len(part['skipped'])} "
                "skipped "
                f"in {part['seconds']} s",
                *[f"- FAILED {t}" for t in part["failed"]],
                *[f"- skipped {t}" for t in part["skipped"]],
            ]
    bench = report.get("bench")
    if bench and "rows" in bench:
        lines += [
            "",
            f"## Bench: {bench.get('name')} ({bench.get('known_as') or 'no published peaks'})",
            "",
            "| measurement | value | peak | of peak |",
            "|---|---|---|---|",
        ]
        for row in bench["rows"]:
            value = "-" if row["value"] is None else f"{row['value']:.4g} {row['unit']}"
            ratio = "-" if row["ratio"] is None else f"{row['ratio']:.0%}"
            lines.append(f"| {row['what']} | {value} | {row['peak'] or '-'} | {ratio} |")
    return "\n".join(lines) + "\n"
