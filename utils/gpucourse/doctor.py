"""``python -m gpucourse doctor``: the environment report a learner pastes into a bug.

``collect()`` gathers the facts (each probe reports its own failure, never a crash), ``diagnose(facts)`` turns them into
findings with a fix, and ``main`` prints both; the exit status is 1 when a finding is an error.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.metadata
import json
import os
import platform
import re
import sys
from collections import Counter
from dataclasses import asdict, dataclass

from . import __version__
from .device import visible_devices_problem
from .frameworks import course_set, load_tensorflow

FRAMEWORKS = (("torch", "PyTorch"), ("tensorflow", "TensorFlow"), ("dali", "DALI"))
# The oldest driver each CUDA major runs on; any CUDA 12.x on 525.60.13, any 13.x on 580 (minor-version
# compatibility): docs.nvidia.com/deploy/cuda-compatibility/minor-version-compatibility.html, Table 1.
MIN_DRIVER = {12: "525.60.13", 13: "580"}
GPU_SET_FIX = ("Use the GPU set, where PyTorch, TensorFlow and DALI share CUDA 12: `make lab GPU=1` rebuilds .venv with it "
               "(`make` picks it by itself where nvidia-smi lists a GPU).")


@dataclass(frozen=True)
class Finding:
    level: str  # "ok", "info", "warning" or "error"
    problem: str
    fix: str = ""


def _error(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}".strip()


def _installed(*distributions: str) -> str | None:
    """The version of the first of these distributions that is installed, else None."""
    for name in distributions:
        with contextlib.suppress(importlib.metadata.PackageNotFoundError):
            return importlib.metadata.version(name)
    return None


def probe_driver() -> dict:
    """The NVIDIA driver, the newest CUDA it supports and its GPUs, read through NVML (nvidia-ml-py)."""
    facts = {"found": False, "version": None, "cuda": None, "gpus": [], "error": None}
    try:
        import pynvml

        pynvml.nvmlInit()
    except Exception as exc:  # ImportError without nvidia-ml-py, NVMLError without a driver
        facts["error"] = "nvidia-ml-py is not installed: " * isinstance(exc, ImportError) + _error(exc)
        return facts
    try:
        cuda = pynvml.nvmlSystemGetCudaDriverVersion()  # 12040 is CUDA 12.4
        facts.update(found=True, version=pynvml.nvmlSystemGetDriverVersion(), cuda=f"{cuda // 1000}.{cuda % 1000 // 10}")
        for index in range(pynvml.nvmlDeviceGetCount()):
            handle = pynvml.nvmlDeviceGetHandleByIndex(index)
            facts["gpus"].append({"index": index, "name": pynvml.nvmlDeviceGetName(handle),
                                  "memory_gib": round(pynvml.nvmlDeviceGetMemoryInfo(handle).total / 2**30, 2),
                                  "compute_capability": "{}.{}".format(*pynvml.nvmlDeviceGetCudaComputeCapability(handle)),
                                  "uuid": pynvml.nvmlDeviceGetUUID(handle)})
    except Exception as exc:
        facts["error"] = _error(exc)
    with contextlib.suppress(Exception):
        pynvml.nvmlShutdown()
    return facts


def _framework(*distributions: str):
    """Makes a framework's probe: ``installed``, ``version`` and ``error`` around what it reads; a failing import is its error."""
    def decorate(read):
        def probe() -> dict:
            version = _installed(*distributions)
            facts = {"installed": version is not None, "version": version, "error": None}
            try:
                return {**facts, **read()} if version else facts
            except Exception as exc:
                return {**facts, "error": _error(exc)}
        return probe
    return decorate


@_framework("torch")
def probe_torch() -> dict:
    """PyTorch's build (CUDA, cuDNN), the GPUs it sees, and why CUDA does not start where it does not."""
    import torch

    facts = {"version": torch.__version__, "cuda": torch.version.cuda, "cuda_available": torch.cuda.is_available(),
             "cudnn": torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None,
             "devices": [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]}
    if facts["cuda"] and not facts["cuda_available"]:
        try:
            torch.cuda.init()  # raises the reason CUDA does not start
        except Exception as exc:
            facts["cuda_error"] = _error(exc)
    return facts


@_framework("tensorflow", "tensorflow-cpu")
def probe_tensorflow() -> dict:
    """TensorFlow's build (CUDA or CPU-only) and how many GPUs it sees."""
    tf, gpus = load_tensorflow()  # quietly: its C++ start-up lines would come before the report
    build = tf.sysconfig.get_build_info()
    return {"version": tf.__version__, "is_cuda_build": bool(build.get("is_cuda_build")), "cuda": build.get("cuda_version"),
            "cudnn": build.get("cudnn_version"), "gpus": len(gpus)}


@_framework("nvidia-dali-cuda120", "nvidia-dali-cuda130")
def probe_dali() -> dict:
    """DALI's version and the CUDA major of its wheel."""
    dali = importlib.import_module("nvidia.dali")
    return {"version": dali.__version__, "cuda": "12" if _installed("nvidia-dali-cuda120") else "13"}


def cuda_major(name: str, files: list[str]) -> int | None:
    """nvidia-cudnn-cu12 -> 12, nvidia-dali-cuda130 -> 13, CUDA 13's unsuffixed wheels (files in nvidia/cu13/) -> 13."""
    found = re.search(r"-cu(\d\d)$|-cuda(\d\d)\d$", name) or next(
        (m for m in map(re.compile(r"^nvidia/cu(\d\d)/").match, files) if m), None)
    return int(next(g for g in found.groups() if g)) if found else None


def probe_nvidia_packages() -> dict:
    """The installed nvidia-* wheels with the CUDA major of each, and library files that two of them claim."""
    packages, owners = {}, {}
    for dist in importlib.metadata.distributions():
        name = (dist.metadata["Name"] or "").lower().replace("_", "-")
        if name.startswith("nvidia-") and not name.startswith("nvidia-ml-py"):
            files = [str(f) for f in dist.files or [] if str(f).startswith("nvidia/")]
            packages[name] = cuda_major(name, files)
            for path in (f for f in files if ".so" in f or f.endswith(".dll")):
                owners.setdefault(path, []).append(name)
    return {"packages": packages, "clashes": {path: names for path, names in owners.items() if len(names) > 1}}


def collect() -> dict:
    """Every fact the diagnosis needs; a probe's own bug becomes its error and never hides the others."""
    facts = {"gpucourse": __version__, "python": platform.python_version(), "platform": platform.platform(),
             "colab": "google.colab" in sys.modules, "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
             "course_set": course_set()}
    for name, probe in (("driver", probe_driver), ("torch", probe_torch), ("tensorflow", probe_tensorflow), ("dali", probe_dali),
                        ("nvidia", probe_nvidia_packages)):
        try:
            facts[name] = probe()
        except Exception as exc:
            facts[name] = {"installed": False, "found": False, "error": _error(exc)}
    return facts


def _version(text, parts: int = 2) -> tuple[int, ...]:
    with contextlib.suppress(ValueError):
        return tuple(int(part) for part in str(text).split(".")[:parts])
    return ()


def diagnose(facts: dict) -> list[Finding]:
    """Plain findings, each with its fix, from the facts of ``collect()``."""
    findings: list[Finding] = []

    def add(level: str, problem: str, fix: str = "") -> None:
        findings.append(Finding(level, problem, fix))

    driver, torch_, tf, dali, nvidia = (facts.get(k) or {} for k in ("driver", "torch", "tensorflow", "dali", "nvidia"))
    gpus, visible = len(driver.get("gpus") or []), facts.get("cuda_visible_devices")
    hidden = visible is not None and visible.strip() in {"", "-1"}
    # CUDA_VISIBLE_DEVICES naming GPUs that do not exist (an index past the count, an unknown UUID) hides them all too
    missing = None if hidden or not gpus else visible_devices_problem(visible, [g.get("uuid") or "" for g in driver["gpus"]])
    if not driver.get("found"):
        add("info", f"No NVIDIA driver found ({driver.get('error') or 'NVML did not start'}): the course runs on the CPU here. "
            "(TensorFlow's start-up lines \"Could not find cuda drivers\" and \"failed call to cuInit ... (303)\" say only this, "
            "so gpucourse holds them back.)", "For a GPU: on Colab choose Runtime > Change runtime type > a GPU; on your own "
            "machine install NVIDIA's driver until `nvidia-smi` lists the card.")
    elif not gpus:
        add("warning", "The NVIDIA driver is loaded but lists no GPU.", "Check `nvidia-smi`.")
    if hidden:
        add("error" if gpus else "warning", f"CUDA_VISIBLE_DEVICES={visible!r} hides every GPU from every framework"
            + (f" (the driver sees {gpus})." if gpus else "."), "Unset it (`unset CUDA_VISIBLE_DEVICES`, or `del os.environ"
            "['CUDA_VISIBLE_DEVICES']` before importing torch) or list the GPUs to use, e.g. CUDA_VISIBLE_DEVICES=0.")
    elif missing:
        hidden = True  # the framework checks below then blame CUDA_VISIBLE_DEVICES, not the driver
        add("error", f"{missing} (the driver sees {gpus}).", "List GPUs that exist: indices from 0 to one less than the count, "
            "or UUIDs from `nvidia-smi -L`; CUDA numbers GPUs fastest first unless CUDA_DEVICE_ORDER=PCI_BUS_ID, so UUIDs are "
            "the safe choice.")

    working = []  # the frameworks that import
    for (key, label), framework in zip(FRAMEWORKS, (torch_, tf, dali), strict=True):
        if not framework.get("installed"):
            add("info", f"{label} is not installed: its cells are skipped.",
                "`make lab` (or `pip install -e '.[course]'`) installs the course environment.")
        elif framework.get("error"):
            add("error", f"{label} is installed but fails to import: {framework['error']}", "Reinstall it: `pip install "
                f"--force-reinstall {'nvidia-dali-cuda120' if key == 'dali' else key}=={framework.get('version')}`.")
        else:
            working.append(label)

    majors: dict[int, list[str]] = {}
    for name, major in sorted((nvidia.get("packages") or {}).items()):
        if major:
            majors.setdefault(major, []).append(name)
    if len(majors) > 1:
        listed = "; ".join(f"CUDA {m}: " + ", ".join(names[:3]) + f" and {len(names) - 3} more" * (len(names) > 3)
                           for m, names in sorted(majors.items()))
        add("warning" if gpus else "info", f"Libraries of two CUDA majors are installed side by side ({listed}): a process "
            "that loads both can get the wrong cuBLAS, cuDNN or NCCL." + ("" if gpus else " Harmless without an NVIDIA GPU."),
            GPU_SET_FIX if gpus else "")
    if clashes := nvidia.get("clashes"):
        path, owners = sorted(clashes.items())[0]
        add("error", f"{len(clashes)} library file(s) belong to two packages at once, e.g. {path} ({' and '.join(owners)}): "
            "the one installed last overwrote the other's, so the framework that needs the other gets the wrong cuDNN or NCCL.",
            "pip cannot untangle this: start afresh with one set, `rm -rf .venv && make lab` (the GPU set where nvidia-smi "
            "lists a GPU). Never `pip install tensorflow[and-cuda]` into PyTorch's CUDA 13 environment.")
    if gpus and not hidden:
        _gpu_findings(add, driver, torch_, tf, dali, majors, working, str(facts.get("platform", "")).startswith("Windows"))
    if not any(f.level in {"error", "warning"} for f in findings):
        add("ok", "Nothing is wrong: the course will use " + ("the GPU." if gpus else "the CPU."))
    return findings


def _gpu_findings(add, driver: dict, torch_: dict, tf: dict, dali: dict, majors: dict, working: list, windows: bool) -> None:
    """Whether the driver runs each framework's CUDA build, and whether the framework sees the GPUs; if not, why not."""
    gpus, cuda, version = len(driver["gpus"]), driver["cuda"], driver["version"]
    old, newer = [], []
    for label, build in (("PyTorch", torch_.get("cuda")), ("TensorFlow", tf.get("is_cuda_build") and tf.get("cuda")),
                         ("DALI", dali.get("cuda"))):
        if label in working and build and (major := _version(build)[:1]):
            need = MIN_DRIVER.get(major[0], "")
            if _version(cuda)[:1] < major or _version(version, 3) < _version(need, 3):
                old.append((label, build, need))
            elif _version(cuda) < _version(build):
                newer.append(f"{label} is built for CUDA {build}, newer than the driver's {cuda}: it runs through CUDA's "
                             f"minor-version compatibility (only code compiled on the fly for {build} could fail).")
    if old:
        add("error", f"The NVIDIA driver {version} supports CUDA up to {cuda}: too old for " + ", ".join(
            f"{label} (built for CUDA {build}, which needs driver {need} or newer)" for label, build, need in old)
            + ". A driver runs every minor version of its CUDA major (minor-version compatibility), not the next major.",
            f"Update the NVIDIA driver to {max((n for *_, n in old), key=lambda n: _version(n, 3))} or newer "
            f"(https://www.nvidia.com/drivers), or install builds for CUDA {cuda} or older.")
    for text in newer:
        add("info", text)
    too_old = [label for label, *_ in old]
    if "PyTorch" in working:
        if not torch_.get("cuda"):
            add("error", f"PyTorch {torch_.get('version')} is a CPU-only build, but the driver sees {gpus} GPU(s).",
                f"Install a CUDA build: pick CUDA {cuda} or older at https://pytorch.org/get-started/locally/ and run the pip "
                "command it gives.")
        elif torch_.get("cuda_available"):
            add("ok", f"PyTorch sees {len(torch_.get('devices') or [])} GPU(s): " + ", ".join(torch_.get("devices") or []) + ".")
        elif "PyTorch" not in too_old:
            add("error", f"PyTorch (CUDA {torch_['cuda']}) cannot use the {gpus} GPU(s) the driver sees: "
                f"{torch_.get('cuda_error') or 'torch.cuda.is_available() is False'}.",
                "Read the error above; `nvidia-smi` must work, and the GPU must not be held in exclusive mode.")
    if "TensorFlow" in working:
        # its CUDA libraries are the cu12 wheels of its and-cuda extra; adding them beside CUDA 13 ones breaks PyTorch
        add_cuda = (GPU_SET_FIX if 13 in majors or str(torch_.get("cuda")).startswith("13") else
                    f"`pip install 'tensorflow[and-cuda]=={tf.get('version')}'` adds them (Linux, WSL2).")
        libraries = "installed, so read `nvidia-smi`." if "nvidia-cudnn-cu12" in majors.get(12, []) else "missing."
        if tf.get("gpus"):
            add("ok", f"TensorFlow sees {tf['gpus']} GPU(s).")
        elif windows:
            add("warning", f"TensorFlow {tf.get('version')} runs on the CPU here: it has no GPU support on native Windows "
                "since 2.11.", "Use WSL2 (Ubuntu in the Windows Subsystem for Linux; the Windows NVIDIA driver serves it) and "
                "`make lab` there. PyTorch does use the GPU on native Windows.")
        elif "TensorFlow" not in too_old:
            add("error", f"TensorFlow {tf.get('version')} sees no GPU though the driver sees {gpus}: " + (
                "its CUDA libraries (nvidia-cudnn-cu12 and the other CUDA 12 wheels) are " + libraries
                if tf.get("is_cuda_build") else "it is a CPU-only build."), add_cuda)


def exit_status(findings: list[Finding]) -> int:
    return 1 if any(f.level == "error" for f in findings) else 0


def _framework_line(label: str, facts: dict) -> str:
    if not facts.get("installed"):
        return f"{label}: not installed"
    if facts.get("error"):
        return f"{label} {facts.get('version')}: FAILS TO IMPORT ({facts['error']})"
    seen = len(facts["devices"]) if "devices" in facts else facts.get("gpus")
    build = ("built for CUDA " + facts["cuda"] if facts["cuda"] else "CPU-only build") if "cuda" in facts else None
    return ", ".join(filter(None, (f"{label} {facts.get('version')}", build, facts.get("cudnn") and f"cuDNN {facts['cudnn']}",
                                   seen is not None and f"sees {seen} GPU(s)")))


def render(facts: dict, findings: list[Finding]) -> str:
    """The report as text: the machine, the driver and its GPUs, each framework, then the diagnosis."""
    driver, visible = facts.get("driver") or {}, facts.get("cuda_visible_devices")
    majors = Counter(m for m in ((facts.get("nvidia") or {}).get("packages") or {}).values() if m)
    lines = [f"gpucourse {facts.get('gpucourse')} environment report",
             f"  Python {facts.get('python')} on {facts.get('platform')}" + (" (Colab)" if facts.get("colab") else ""),
             "  CUDA_VISIBLE_DEVICES: " + ("(unset)" if visible is None else repr(visible)),
             f"  pinned set: {facts.get('course_set') or 'not recorded (not made by `make`)'}; NVIDIA wheels per CUDA major: "
             + (", ".join(f"CUDA {m}: {n}" for m, n in sorted(majors.items())) or "none")]
    if driver.get("found"):
        lines.append(f"  NVIDIA driver {driver.get('version')}, supports CUDA up to {driver.get('cuda')}")
        lines += [f"    GPU {g['index']}: {g['name']}, {g['memory_gib']} GiB, compute capability {g['compute_capability']}"
                  for g in driver.get("gpus") or []]
    else:
        lines.append(f"  NVIDIA driver: not found ({driver.get('error')})")
    lines += ["  " + _framework_line(label, facts.get(key) or {}) for key, label in FRAMEWORKS] + ["Diagnosis:"]
    for finding in findings:
        lines += [f"  [{finding.level}] {finding.problem}"] + ([f"      fix: {finding.fix}"] if finding.fix else [])
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(prog="python -m gpucourse doctor", description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print the facts and findings as JSON")
    args = parser.parse_args(argv)
    facts = collect()
    findings = diagnose(facts)
    if args.json:
        print(json.dumps({"facts": facts, "findings": [asdict(f) for f in findings]}, indent=2, default=str))
    else:
        print(render(facts, findings))
    return exit_status(findings)
