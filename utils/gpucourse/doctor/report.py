"""The doctor's report: the facts and the diagnosis as text to paste into a bug, or as JSON; and
``python -m gpucourse doctor``, which exits 1 on an error."""

import argparse
import json
from dataclasses import asdict

from . import __doc__ as DESCRIPTION
from .checks import Finding, diagnose
from .probes import FRAMEWORKS, collect


def _framework_line(label: str, info: dict) -> str:
    if not info.get("installed"):
        return f"  {label}: not installed"
    if info.get("error"):
        return f"  {label} {info['version']}, FAILS TO IMPORT ({info['error']})"
    about = [f"built for CUDA {info['cuda']}" if info.get("cuda") else "CPU-only build"]
    if info.get("cudnn"):
        about.append(f"cuDNN {info['cudnn']}")
    seen = len(info["devices"]) if "devices" in info else info.get("gpus")
    if seen is not None:
        about.append(f"sees {seen} GPU(s)")
    return f"  {label} {info['version']}, {', '.join(about)}"


def render(facts: dict, findings: list[Finding]) -> str:
    driver = facts.get("driver") or {}
    visible = facts.get("cuda_visible_devices")
    where = f"Python {facts.get('python')} on {facts.get('platform')}"
    if facts.get("colab"):
        where += " (Colab)"
    visible_text = "unset" if visible is None else repr(visible)
    pinned = facts.get("course_set") or "none (not made by `make`)"
    lines = [
        f"gpucourse {facts.get('gpucourse')} environment report: {where}, "
        f"CUDA_VISIBLE_DEVICES {visible_text}, pinned set: {pinned}"
    ]
    if driver.get("found"):
        lines.append(
            f"  NVIDIA driver {driver.get('version')}, supports CUDA up to {driver.get('cuda')}"
        )
    else:
        lines.append(f"  NVIDIA driver: not found ({driver.get('error')})")
    for gpu in driver.get("gpus") or []:
        lines.append(
            f"    GPU {gpu['index']}: {gpu['name']}, {gpu['memory_gib']} GiB, "
            f"compute capability {gpu['compute_capability']}"
        )
    for key, (label, *_) in FRAMEWORKS.items():
        lines.append(_framework_line(label, facts.get(key) or {}))
    shm = facts.get("shm") or {}
    if shm.get("total_mib") is not None:
        lines.append(f"  shared memory {shm.get('path')}: {shm['total_mib']} MiB")
    lines.append("Diagnosis:")
    for finding in findings:
        lines.append(f"  [{finding.level}] {finding.problem}")
        if finding.fix:
            lines.append(f"      fix: {finding.fix}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m gpucourse doctor", description=DESCRIPTION)
    parser.add_argument("--json", action="store_true", help="print the facts and findings as JSON")
    as_json = parser.parse_args(argv).json  # --help exits before the probes run
    facts = collect()
    findings = diagnose(facts)
    if as_json:
        report = {"facts": facts, "findings": [asdict(finding) for finding in findings]}
        print(json.dumps(report, indent=2, default=str))
    else:
        print(render(facts, findings))
    return 1 if any(finding.level == "error" for finding in findings) else 0
