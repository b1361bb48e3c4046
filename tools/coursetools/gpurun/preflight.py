"""What the machine must have, or lacks, said as the machine's with its fix, never as a lesson's.

The quick check is the standard library only (the Makefile and the kit run it before anything is
installed). Each problem or gap: {"code", "problem", "fix", "kind", "part", "needles" (a lesson's
code that uses it), "symptoms" (a regex for the failures it explains)}. A problem (a small
/dev/shm, a broken torchvision) makes a failure it explains inconclusive; a gap (a library the
machine lacks: DALI, TensorFlow, RAPIDS, a compiler, a second GPU) leaves the part that needs it
"not validated", in the lessons and in grading alike. What the doctor finds (`gpucourse doctor
--json`) is read from its finding codes, never found again here.
"""

from __future__ import annotations

import ctypes
import importlib.metadata
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

NVML = ["nvml.dll"] if sys.platform == "win32" else ["libnvidia-ml.so.1", "libnvidia-ml.so"]


def nvml_gpus() -> tuple[int | None, str]:
    """(the number of GPUs the NVIDIA driver lists, "") or (None, why not), through NVML with
    ctypes: nvidia-ml-py is not installed yet when this runs."""
    lib, error = None, ""
    for name in NVML:
        try:
            lib = ctypes.CDLL(name)
            break
        except OSError as exc:
            error = error or str(exc)
    if lib is None:
        return None, f"the NVIDIA driver's management library cannot be loaded ({error})"
    status = (getattr(lib, "nvmlInit_v2", None) or lib.nvmlInit)()
    if status != 0:
        return None, f"the NVIDIA driver does not start (nvmlInit returned error {status})"
    count = ctypes.c_uint(0)
    try:
        status = lib.nvmlDeviceGetCount_v2(ctypes.byref(count))
    finally:
        lib.nvmlShutdown()
    return (count.value, "") if status == 0 else (None, f"nvmlDeviceGetCount: error {status}")


def quick_problem(environ=os.environ, nvml=nvml_gpus) -> tuple[str, str] | None:
    """(why, what to do) when this machine plainly cannot run the GPU path; None when it may."""
    visible = environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None and visible.strip() in {"", "-1"}:
        return (
            f"CUDA_VISIBLE_DEVICES={visible!r} hides every GPU from CUDA",
            "unset it (`unset CUDA_VISIBLE_DEVICES`) or name the GPU, e.g. CUDA_VISIBLE_DEVICES=0",
        )
    count, error = nvml()
    if count is None:
        return (
            f"no NVIDIA driver: {error}",
            "run it on a machine with an NVIDIA GPU and its driver (`nvidia-smi` lists the card)",
        )
    if count == 0:
        return "the NVIDIA driver is loaded but lists no GPU", "check `nvidia-smi`, then run again"
    return None


def cuda_problem(report: dict) -> tuple[str, str] | None:
    """(why, what to do) when PyTorch cannot use CUDA, from `gpucourse doctor --json`'s report."""
    if report.get("error"):  # the doctor itself failed: its last line says why
        last = (report["error"].strip().splitlines() or ["no output"])[-1]
        return f"`python -m gpucourse doctor --json` failed ({last})", "run it and fix what it says"
    torch_ = (report.get("facts") or {}).get("torch") or {}
    if not torch_.get("installed"):
        return (
            f"PyTorch is not installed for {sys.executable}",
            "`make test-gpu` sets up .venv; or name a Python that has a CUDA PyTorch (PYTHON=)",
        )
    if torch_.get("error"):
        return f"PyTorch fails to import: {torch_['error']}", "reinstall it; see the doctor"
    if not torch_.get("cuda"):
        return (
            f"PyTorch {torch_.get('version')} is a CPU-only build",
            "install a CUDA build (the command at https://pytorch.org/get-started/locally/)",
        )
    if not torch_.get("cuda_available"):
        errors = [f for f in report.get("findings") or [] if f.get("level") == "error"]
        if errors:
            return errors[0]["problem"], errors[0].get("fix") or "see `python -m gpucourse doctor`"
        return "PyTorch sees no CUDA device", "see `python -m gpucourse doctor`"
    return None


def stop_message(problem: tuple[str, str]) -> str:
    why, fix = problem
    return (
        "make test-gpu: stopped before running anything: this machine cannot run the GPU path.\n"
        f"  why: {why}.\n  what to do: {fix}.\n  This machine can run the CPU suite: `make test`. "
        "`python -m gpucourse doctor` says why."
    )


VISION_PROBE = """import json, torch
facts = {'torch': torch.__version__, 'cuda': torch.version.cuda}
try:
    import torchvision
    from torchvision.extension import _check_cuda_version
    facts.update(torchvision=torchvision.__version__, vision_cuda=_check_cuda_version())
except Exception as exc:
    facts['error'] = f'{type(exc).__name__}: {exc}'
print(json.dumps(facts))"""


def probe_torchvision(python: str = sys.executable) -> dict:
    """torch's and torchvision's versions and CUDA builds, or the error, from ``python``."""
    try:
        done = subprocess.run([python, "-c", VISION_PROBE], capture_output=True, text=True)
        return json.loads(done.stdout.strip().splitlines()[-1])
    except (OSError, json.JSONDecodeError, IndexError) as exc:
        return {"error": f"the probe did not run: {type(exc).__name__}: {exc}"}


def torchvision_problem(facts: dict) -> dict | None:
    if "torch" not in facts:
        return None  # no PyTorch: cuda_problem says so
    fix = (
        f"install the torchvision built with torch {facts['torch']} (the same CUDA; "
        "https://pytorch.org/get-started/previous-versions/ pairs them)"
    )
    problem = facts.get("error") and f"torchvision cannot be used: {facts['error']}"
    built, cuda = facts.get("vision_cuda"), facts.get("cuda")
    if not problem and cuda and isinstance(built, int) and built <= 0:
        problem = f"torchvision {facts['torchvision']} has no CUDA kernels beside CUDA {cuda}"
    return {"code": "torchvision", "problem": problem, "fix": fix} if problem else None


def managed_problem(stdlib: str | None = None, prefix=sys.prefix, base=sys.base_prefix):
    """A Python pip may not install into (PEP 668 "externally managed"), outside a venv."""
    marker = Path(stdlib or sysconfig.get_paths()["stdlib"]) / "EXTERNALLY-MANAGED"
    if prefix != base or not marker.exists():
        return None
    return {
        "code": "externally-managed",
        "problem": f"{sys.executable}'s environment is externally managed (PEP 668): pip may not "
        "add to it",
        "fix": "run from a venv layered on it: `python3 -m venv --system-site-packages "
        "--without-pip .gpu-env`, then PYTHON=.gpu-env/bin/python (the GPU kit does this)",
    }


def compiler_problem(environ=os.environ, which=shutil.which, include: str | None = None):
    """Why torch.compile cannot build its launchers here, or None: Inductor and Triton need a C
    compiler (Triton reads $CC, then gcc, clang, cc) and Python.h."""
    compiler = next((c for c in (environ.get("CC"), "gcc", "clang", "cc") if c and which(c)), None)
    headers = (Path(include or sysconfig.get_paths()["include"]) / "Python.h").exists()
    found = (("C compiler ($CC, gcc or clang)", compiler), ("Python.h", headers))
    missing = [what for what, ok in found if not ok]
    if missing:
        return f"no {' and no '.join(missing)}: torch.compile cannot build its launchers"
    return None


def machine_problems(doctor: dict, vision: dict | None = None) -> list[dict]:
    """Every problem of the machine the lessons would otherwise report as their own failures: the
    doctor's (a small /dev/shm) and those it does not look for."""
    found = [torchvision_problem(probe_torchvision() if vision is None else vision)]
    found += [
        {"code": "shm", "problem": f["problem"].rstrip("."), "fix": f["fix"].rstrip(".")}
        for f in doctor.get("findings") or []
        if f.get("code") == "small_dev_shm"
    ]
    found.append(managed_problem())
    return [_found("problem", p["code"], p["problem"], p["fix"]) for p in found if p]


# Each problem (the first three) and gap (a library or part of the machine a lesson's GPU path
# needs): its part of a lesson, the code that uses it, a regex for the failures it explains.
# Lesson 05's test cells say "DALI is not installed".
APPLIES = {
    "torchvision": ("PyTorch", ["torchvision", "jpeg_dataset("], r"torchvision"),
    "shm": ("PyTorch", ["num_workers"], r"Bus error|shared memory|/dev/shm|worker"),
    "externally-managed": ("PyTorch", [], r"externally.managed"),
    "TensorFlow": ("TensorFlow", ["import_tensorflow(", "import tensorflow"], r"tensorflow"),
    "DALI": ("DALI", ["import_dali(", "nvidia.dali"], r"DALI is not installed|nvidia\.dali"),
    "DALI's TensorFlow plugin": ("TensorFlow", ["import_dali_tf("], r"plugin\.tf"),
    "RAPIDS": ("PyTorch", ["cudf", "cuml"], r"No module named '(cudf|cuml)"),
    "a C compiler": ("PyTorch", ["torch.compile("], r"Python\.h|compiler|gcc|InductorError"),
    "two GPUs": ("PyTorch", ["DistributedDataParallel", "torchrun", "MirroredStrategy"], r"$^"),
}
FRAMEWORK_CODES = {"framework_missing", "framework_import_error", "tf_cpu_only_build"}
FRAMEWORK_CODES |= {"tf_without_cuda", "tf_on_native_windows"}


def machine_gaps(doctor: dict, local: dict) -> list[dict]:
    """What this machine lacks, from the doctor's finding codes (TensorFlow, DALI) and ``local``
    facts (local_facts): each a gap, with the reason."""
    why: dict[str, str] = {}
    for f in doctor.get("findings") or []:
        for name in ("TensorFlow", "DALI"):
            if f.get("code") in FRAMEWORK_CODES and f.get("problem", "").startswith(name):
                why.setdefault(name, f["problem"].rstrip("."))
    if not local.get("dali_tf_plugin"):
        why["DALI's TensorFlow plugin"] = "not installed (it compiles against TensorFlow)"
    if not local.get("rapids"):
        why["RAPIDS"] = "cuDF and cuML are not installed (Colab's GPU runtime has them)"
    if local.get("compiler"):
        why["a C compiler"] = local["compiler"]
    gpus = len(((doctor.get("facts") or {}).get("torch") or {}).get("devices") or [])
    if gpus < 2:
        why["two GPUs"] = f"{gpus} GPU visible: NCCL, DDP and DataParallel across GPUs did not run"
    fix = "a GPU run on a machine that has it (docs/gpu-runner.md)"
    return [_found("gap", name, f"{name}: {reason}", fix) for name, reason in why.items()]


def _found(kind: str, code: str, problem: str, fix: str) -> dict:
    part, needles, symptoms = APPLIES[code]
    found = dict(code=code, problem=problem, fix=fix, kind=kind, part=part, needles=needles)
    return {**found, "symptoms": symptoms}


def local_facts() -> dict:
    """What the doctor does not report: the compiler's problem, DALI's plugin, RAPIDS."""
    names = {(d.metadata["Name"] or "").lower() for d in importlib.metadata.distributions()}
    return {
        "compiler": compiler_problem(),
        "dali_tf_plugin": any(n.startswith("nvidia-dali-tf-plugin") for n in names),
        "rapids": importlib.util.find_spec("cudf") is not None,
    }
