"""``python -m gpucourse doctor``: the environment report a learner pastes into a bug.

``collect()`` gathers facts (the NVIDIA driver through nvidia-ml-py, each
framework's build and what it sees), ``diagnose(facts)`` turns them into
findings with a fix, and ``main`` prints both. Every probe catches its own
failure, so a broken install is reported, never a crash. The exit status is
1 when an installed framework cannot see a GPU that the driver sees (or fails
to import), else 0.
"""

from __future__ import annotations

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
from .frameworks import course_set


@dataclass(frozen=True)
class Finding:
    level: str  # "ok", "info", "warning" or "error"
    problem: str
    fix: str = ""


def _error(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}".strip()


def _package_version(*names: str) -> str | None:
    for name in names:
        try:
            return importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue
    return None


def _cuda_version(number: int) -> str:
    """NVML's 12040 -> '12.4'."""
    return f"{number // 1000}.{number % 1000 // 10}"


def probe_driver() -> dict:
    facts = {"found": False, "version": None, "cuda": None, "gpus": [], "error": None}
    try:
        import pynvml
    except ImportError as exc:
        facts["error"] = f"nvidia-ml-py is not installed ({_error(exc)})"
        return facts
    try:
        pynvml.nvmlInit()
    except Exception as exc:
        facts["error"] = _error(exc)
        return facts
    try:
        facts.update(found=True, version=_text(pynvml.nvmlSystemGetDriverVersion()),
                     cuda=_cuda_version(pynvml.nvmlSystemGetCudaDriverVersion()))
        for index in range(pynvml.nvmlDeviceGetCount()):
            handle = pynvml.nvmlDeviceGetHandleByIndex(index)
            major, minor = pynvml.nvmlDeviceGetCudaComputeCapability(handle)
            facts["gpus"].append({"index": index, "name": _text(pynvml.nvmlDeviceGetName(handle)),
                                  "memory_gib": round(pynvml.nvmlDeviceGetMemoryInfo(handle).total / 2**30, 2),
                                  "compute_capability": f"{major}.{minor}", "uuid": _text(pynvml.nvmlDeviceGetUUID(handle))})
    except Exception as exc:
        facts["error"] = _error(exc)
    finally:
        try:
            pynvml.nvmlShutdown()
        except Exception:
            pass
    return facts


def _text(value) -> str:
    return value.decode() if isinstance(value, bytes) else value


def probe_torch() -> dict:
    facts = {"installed": False, "version": _package_version("torch"), "error": None}
    if facts["version"] is None:
        return facts
    facts["installed"] = True
    try:
        import torch

        facts.update(
            version=torch.__version__,
            cuda=torch.version.cuda,
            cudnn=torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None,
            cuda_available=torch.cuda.is_available(),
            devices=[torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())],
        )
        if facts["cuda"] and not facts["cuda_available"]:
            try:
                torch.cuda.init()
            except Exception as exc:
                facts["cuda_error"] = _error(exc)
    except Exception as exc:
        facts["error"] = _error(exc)
    return facts


def probe_tensorflow() -> dict:
    facts = {"installed": False, "version": _package_version("tensorflow", "tensorflow-cpu"), "error": None}
    if facts["version"] is None:
        return facts
    facts["installed"] = True
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    from .frameworks import load_triton_before_tensorflow, quiet_tensorflow_startup

    load_triton_before_tensorflow()
    try:
        with quiet_tensorflow_startup():  # its C++ start-up lines would come before the report
            import tensorflow as tf

            build = dict(tf.sysconfig.get_build_info())
            facts.update(
                version=tf.__version__,
                is_cuda_build=bool(build.get("is_cuda_build")),
                cuda=build.get("cuda_version"),
                cudnn=build.get("cudnn_version"),
                gpus=len(tf.config.list_physical_devices("GPU")),
            )
    except Exception as exc:
        facts["error"] = _error(exc)
    return facts


def probe_dali() -> dict:
    facts = {"installed": False, "version": _package_version("nvidia-dali-cuda120", "nvidia-dali-cuda130"), "error": None}
    if facts["version"] is None:
        return facts
    facts.update(installed=True, cuda="12" if _package_version("nvidia-dali-cuda120") else "13")
    try:
        dali = importlib.import_module("nvidia.dali")
        facts["version"] = dali.__version__
    except Exception as exc:
        facts["error"] = _error(exc)
    return facts


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
        if not name.startswith("nvidia-") or name.startswith("nvidia-ml-py"):
            continue
        files = [str(f) for f in dist.files or [] if str(f).startswith("nvidia/")]
        packages[name] = cuda_major(name, files)
        for path in files:
            if ".so" in path or path.endswith(".dll"):
                owners.setdefault(path, []).append(name)
    return {"packages": packages, "clashes": {path: names for path, names in owners.items() if len(names) > 1}}


def collect() -> dict:
    """Every fact the diagnosis needs; each probe reports its own failure."""
    facts = {
        "gpucourse": __version__,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "colab": "google.colab" in sys.modules,
        "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
        "course_set": course_set(),
    }
    for name, probe in (("driver", probe_driver), ("torch", probe_torch), ("tensorflow", probe_tensorflow), ("dali", probe_dali),
                        ("nvidia", probe_nvidia_packages)):
        try:
            facts[name] = probe()
        except Exception as exc:  # a probe's own bug must not hide the others
            facts[name] = {"installed": False, "found": False, "error": _error(exc)}
    return facts


def _version_tuple(text, parts: int = 2) -> tuple[int, ...]:
    try:
        return tuple(int(part) for part in str(text).split(".")[:parts])
    except ValueError:
        return ()


# The oldest driver each CUDA major runs on; any CUDA 12.x on 525.60.13, any 13.x on 580 (minor-version
# compatibility): docs.nvidia.com/deploy/cuda-compatibility/minor-version-compatibility.html, Table 1.
MIN_DRIVER = {12: "525.60.13", 13: "580"}
GPU_SET_FIX = ("Use the GPU set, where PyTorch, TensorFlow and DALI share CUDA 12: `make lab GPU=1` rebuilds .venv with it "
               "(`make` picks it by itself where nvidia-smi lists a GPU).")


def _driver_findings(driver: dict, builds: list[tuple[str, str]]) -> list[Finding]:
    """A driver too old for the frameworks' CUDA builds (one error), and builds it runs by minor-version compatibility."""
    old, findings, have = [], [], _version_tuple(driver.get("cuda"))
    for label, build in builds:
        major = _version_tuple(build)[:1]
        if not major or not have or not driver.get("version"):
            continue
        need = MIN_DRIVER.get(major[0], "")
        if have[:1] < major or _version_tuple(driver["version"], 3) < _version_tuple(need, 3):
            old.append((label, build, need))
        elif have < _version_tuple(build):
            findings.append(Finding("info", f"{label} is built for CUDA {build}, newer than the driver's {driver.get('cuda')}: "
                                    f"it runs through CUDA's minor-version compatibility (only code compiled on the fly "
                                    f"for {build} could fail)."))
    if old:
        need = max((n for _, _, n in old), key=lambda n: _version_tuple(n, 3))
        findings.insert(0, Finding(
            "error",
            f"The NVIDIA driver {driver['version']} supports CUDA up to {driver.get('cuda')}: too old for "
            + ", ".join(f"{label} (built for CUDA {build}, which needs driver {n} or newer)" for label, build, n in old)
            + ". A driver runs every minor version of its CUDA major (minor-version compatibility), not the next major.",
            f"Update the NVIDIA driver to {need} or newer (https://www.nvidia.com/drivers), or install builds for "
            f"CUDA {driver.get('cuda')} or older.",
        ))
    return findings


def diagnose(facts: dict) -> list[Finding]:
    """Plain findings, each with the fix, from the facts of ``collect()``."""
    findings: list[Finding] = []
    driver, torch_, tf, dali = (facts.get(k) or {} for k in ("driver", "torch", "tensorflow", "dali"))
    gpus = len(driver.get("gpus") or [])
    visible = facts.get("cuda_visible_devices")
    hidden = visible is not None and visible.strip() in {"", "-1"}
    # CUDA_VISIBLE_DEVICES naming GPUs that do not exist (an index past the count, an unknown UUID) hides them all too
    missing = None if hidden or not gpus else visible_devices_problem(visible, [g.get("uuid") or "" for g in driver["gpus"]])

    if not driver.get("found"):
        findings.append(Finding(
            "info",
            f"No NVIDIA driver found ({driver.get('error') or 'NVML did not start'}): the course runs on the CPU here. "
            "(TensorFlow's start-up lines \"Could not find cuda drivers\" and \"failed call to cuInit ... (303)\" say "
            "only this, so gpucourse holds them back.)",
            "For a GPU: on Colab choose Runtime > Change runtime type > a GPU; on your own machine install "
            "NVIDIA's driver until `nvidia-smi` lists the card.",
        ))
    elif gpus == 0:
        findings.append(Finding("warning", "The NVIDIA driver is loaded but lists no GPU.", "Check `nvidia-smi`."))

    if hidden:
        findings.append(Finding(
            "error" if gpus else "warning",
            f"CUDA_VISIBLE_DEVICES={visible!r} hides every GPU from every framework"
            + (f" (the driver sees {gpus})." if gpus else "."),
            "Unset it (`unset CUDA_VISIBLE_DEVICES`, or `del os.environ['CUDA_VISIBLE_DEVICES']` before importing "
            "torch) or list the GPUs to use, e.g. CUDA_VISIBLE_DEVICES=0.",
        ))
    elif missing:
        hidden = True  # the framework checks below then blame CUDA_VISIBLE_DEVICES, not the driver
        findings.append(Finding(
            "error", missing + f" (the driver sees {gpus}).",
            "List GPUs that exist: indices from 0 to one less than the count, or UUIDs from `nvidia-smi -L`; "
            "CUDA numbers GPUs fastest first unless CUDA_DEVICE_ORDER=PCI_BUS_ID, so UUIDs are the safe choice.",
        ))

    for name, label, framework in (("torch", "PyTorch", torch_), ("tensorflow", "TensorFlow", tf), ("dali", "DALI", dali)):
        if not framework.get("installed"):
            findings.append(Finding(
                "info",
                f"{label} is not installed: its cells are skipped.",
                "`make lab` (or `pip install -e '.[course]'`) installs the course environment.",
            ))
        elif framework.get("error"):
            findings.append(Finding(
                "error",
                f"{label} is installed but fails to import: {framework['error']}",
                f"Reinstall it: `pip install --force-reinstall {name if name != 'dali' else 'nvidia-dali-cuda120'}"
                f"=={framework.get('version')}`.",
            ))

    nvidia = facts.get("nvidia") or {}
    majors: dict[int, list[str]] = {}
    for name, major in (nvidia.get("packages") or {}).items():
        if major:
            majors.setdefault(major, []).append(name)
    if len(majors) > 1:
        listed = "; ".join(f"CUDA {m}: " + ", ".join(sorted(names)[:3]) + (f" and {len(names) - 3} more" * (len(names) > 3))
                           for m, names in sorted(majors.items()))
        findings.append(Finding(
            "warning" if gpus else "info",
            f"Libraries of two CUDA majors are installed side by side ({listed}): a process that loads both can get "
            "the wrong cuBLAS, cuDNN or NCCL." + ("" if gpus else " Harmless without an NVIDIA GPU."),
            GPU_SET_FIX if gpus else "",
        ))
    clashes = nvidia.get("clashes") or {}
    if clashes:
        path, owners = sorted(clashes.items())[0]
        findings.append(Finding(
            "error",
            f"{len(clashes)} library file(s) belong to two packages at once, e.g. {path} ({' and '.join(owners)}): the "
            "one installed last overwrote the other's, so the framework that needs the other gets the wrong cuDNN or NCCL.",
            "pip cannot untangle this: start afresh with one set, `rm -rf .venv && make lab` (the GPU set where "
            "nvidia-smi lists a GPU). Never `pip install tensorflow[and-cuda]` into PyTorch's CUDA 13 environment.",
        ))

    builds = [("PyTorch", torch_.get("cuda"), torch_), ("TensorFlow", tf.get("cuda") if tf.get("is_cuda_build") else None, tf),
              ("DALI", dali.get("cuda"), dali)]
    driver_findings = _driver_findings(driver, [(label, build) for label, build, framework in builds
                                                if gpus and not hidden and framework.get("installed") and build])
    findings += driver_findings
    too_old = {label for label, *_ in builds if any(f.level == "error" and f"{label} (" in f.problem for f in driver_findings)}
    windows = str(facts.get("platform", "")).startswith("Windows")

    if torch_.get("installed") and not torch_.get("error") and gpus and not hidden:
        build = torch_.get("cuda")
        if not build:
            findings.append(Finding(
                "error",
                f"PyTorch {torch_.get('version')} is a CPU-only build, but the driver sees {gpus} GPU(s).",
                f"Install a CUDA build: pick CUDA {driver.get('cuda')} or older at https://pytorch.org/get-started/locally/ "
                "and run the pip command it gives.",
            ))
        elif not torch_.get("cuda_available"):
            if "PyTorch" not in too_old:
                findings.append(Finding(
                    "error",
                    f"PyTorch (CUDA {build}) cannot use the {gpus} GPU(s) the driver sees: "
                    f"{torch_.get('cuda_error') or 'torch.cuda.is_available() is False'}.",
                    "Read the error above; `nvidia-smi` must work, and the GPU must not be held in exclusive mode.",
                ))
        else:
            findings.append(Finding("ok", f"PyTorch sees {len(torch_.get('devices') or [])} GPU(s): "
                                    + ", ".join(torch_.get("devices") or []) + "."))

    if tf.get("installed") and not tf.get("error") and gpus and not hidden:
        # its CUDA libraries are the cu12 wheels of its and-cuda extra; adding them beside CUDA 13 ones breaks PyTorch
        add_cuda = (GPU_SET_FIX if 13 in majors or str(torch_.get("cuda", "")).startswith("13") else
                    f"`pip install 'tensorflow[and-cuda]=={tf.get('version')}'` adds them (Linux, WSL2).")
        libraries = "installed, so read `nvidia-smi`." if "nvidia-cudnn-cu12" in majors.get(12, []) else "missing."
        if tf.get("gpus"):
            findings.append(Finding("ok", f"TensorFlow sees {tf['gpus']} GPU(s)."))
        elif windows:
            findings.append(Finding(
                "warning",
                f"TensorFlow {tf.get('version')} runs on the CPU here: it has no GPU support on native Windows since 2.11.",
                "Use WSL2 (Ubuntu in the Windows Subsystem for Linux; the Windows NVIDIA driver serves it) and `make lab` "
                "there. PyTorch does use the GPU on native Windows.",
            ))
        elif "TensorFlow" not in too_old:
            findings.append(Finding("error", f"TensorFlow {tf.get('version')} sees no GPU though the driver sees {gpus}: "
                                    + ("its CUDA libraries (nvidia-cudnn-cu12 and the other CUDA 12 wheels) are " + libraries
                                       if tf.get("is_cuda_build") else "it is a CPU-only build."), add_cuda))

    if not any(f.level in {"error", "warning"} for f in findings):
        findings.append(Finding("ok", "Nothing is wrong: the course will use " + ("the GPU." if gpus else "the CPU.")))
    return findings


def exit_status(findings: list[Finding]) -> int:
    return 1 if any(f.level == "error" for f in findings) else 0


def _framework_line(label: str, facts: dict) -> str:
    if not facts.get("installed"):
        return f"{label}: not installed"
    if facts.get("error"):
        return f"{label} {facts.get('version')}: FAILS TO IMPORT ({facts['error']})"
    parts = [f"{label} {facts.get('version')}"]
    if "cuda" in facts:
        parts.append(f"built for CUDA {facts['cuda']}" if facts.get("cuda") else "CPU-only build")
    if facts.get("cudnn"):
        parts.append(f"cuDNN {facts['cudnn']}")
    if "devices" in facts:
        parts.append(f"sees {len(facts['devices'])} GPU(s)")
    elif "gpus" in facts:
        parts.append(f"sees {facts['gpus']} GPU(s)")
    return ", ".join(parts)


def render(facts: dict, findings: list[Finding]) -> str:
    driver = facts.get("driver") or {}
    visible = facts.get("cuda_visible_devices")
    lines = [
        f"gpucourse {facts.get('gpucourse')} environment report",
        f"  Python {facts.get('python')} on {facts.get('platform')}" + (" (Colab)" if facts.get("colab") else ""),
        "  CUDA_VISIBLE_DEVICES: " + ("(unset)" if visible is None else repr(visible)),
        f"  pinned set: {facts.get('course_set') or 'not recorded (not made by `make`)'}; NVIDIA wheels per CUDA major: "
        + (", ".join(f"CUDA {m}: {n}" for m, n in sorted(Counter(
            v for v in ((facts.get("nvidia") or {}).get("packages") or {}).values() if v).items())) or "none"),
    ]
    if driver.get("found"):
        lines.append(f"  NVIDIA driver {driver.get('version')}, supports CUDA up to {driver.get('cuda')}")
        for gpu in driver.get("gpus") or []:
            lines.append(
                f"    GPU {gpu['index']}: {gpu['name']}, {gpu['memory_gib']} GiB, compute capability {gpu['compute_capability']}"
            )
    else:
        lines.append(f"  NVIDIA driver: not found ({driver.get('error')})")
    lines += ["  " + _framework_line(label, facts.get(key) or {}) for key, label in
              (("torch", "PyTorch"), ("tensorflow", "TensorFlow"), ("dali", "DALI"))]
    lines.append("Diagnosis:")
    for finding in findings:
        lines.append(f"  [{finding.level}] {finding.problem}")
        if finding.fix:
            lines.append(f"      fix: {finding.fix}")
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
