"""What the machine must have before a lesson runs, said as the machine's problem with its fix.

Standard library only: the Makefile runs the quick check before anything is installed.
"""

from __future__ import annotations

import ctypes
import json
import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

CPU_ADVICE = (
    "This machine can run the CPU suite: `make test`. `python -m gpucourse doctor` explains what "
    "it sees."
)
SHM_NEEDED_MIB = (
    1024  # lesson 09's decode workers: 8 workers x prefetch 2 x 12.6 MB batches, with room to spare
)
# What a lesson's code says when it needs the part of the machine a check looks at (notebook_uses in
# runs.py).
TORCHVISION_NEEDLES = ("torchvision", "jpeg_dataset(")
LOADER_NEEDLES = ("num_workers",)
NVML_LIBRARIES = (
    ["nvml.dll"] if sys.platform == "win32" else ["libnvidia-ml.so.1", "libnvidia-ml.so"]
)


def _nvml_library():
    """(the NVML library through ctypes, "") or (None, why it cannot be loaded)."""
    error = ""
    for name in NVML_LIBRARIES:
        try:
            return ctypes.CDLL(name), ""
        except OSError as exc:
            error = error or str(exc)
    return None, f"the NVIDIA driver's management library cannot be loaded ({error})"


def nvml_gpus() -> tuple[int | None, str]:
    """(number of GPUs the NVIDIA driver lists, "") or (None, why not), through NVML with ctypes
    only."""
    lib, error = _nvml_library()
    if lib is None:
        return None, error
    status = (getattr(lib, "nvmlInit_v2", None) or lib.nvmlInit)()
    if status != 0:
        return None, f"the NVIDIA driver does not start (nvmlInit returned error {status})"
    count = ctypes.c_uint(0)
    try:
        status = lib.nvmlDeviceGetCount_v2(ctypes.byref(count))
    finally:
        lib.nvmlShutdown()
    return (
        (count.value, "") if status == 0 else (None, f"nvmlDeviceGetCount returned error {status}")
    )


def quick_problem(environ=os.environ, nvml=nvml_gpus) -> tuple[str, str] | None:
    """(why, what to do) when this machine plainly cannot run the GPU path; None when it may."""
    visible = environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None and visible.strip() in {"", "-1"}:
        return (
            f"CUDA_VISIBLE_DEVICES={visible!r} hides every GPU from CUDA",
            "unset it (`unset CUDA_VISIBLE_DEVICES`) or name the GPU to test, e.g. "
            "CUDA_VISIBLE_DEVICES=0",
        )
    count, error = nvml()
    if count is None:
        return (
            f"no NVIDIA driver: {error}",
            "run `make test-gpu` on a machine with an NVIDIA GPU and its driver "
            "(`nvidia-smi` must list the card)",
        )
    if count == 0:
        return (
            "the NVIDIA driver is loaded but lists no GPU",
            "check `nvidia-smi`, then run this again",
        )
    return None


def cuda_problem(report: dict, python: str = sys.executable) -> tuple[str, str] | None:
    """(why, what to do) when PyTorch cannot use CUDA, from ``python -m gpucourse doctor --json``'s
    report."""
    torch_ = (report.get("facts") or {}).get("torch") or {}
    if not torch_.get("installed"):
        return (
            f"PyTorch is not installed for {python}",
            "`make test-gpu` sets up .venv with the course environment; or install torch into "
            "this Python",
        )
    if torch_.get("error"):
        return (
            f"PyTorch fails to import: {torch_['error']}",
            "reinstall it; `python -m gpucourse doctor` has details",
        )
    if not torch_.get("cuda"):
        return (
            f"PyTorch {torch_.get('version')} is a CPU-only build",
            "install a CUDA build of PyTorch (the command at "
            "https://pytorch.org/get-started/locally/)",
        )
    if not torch_.get("cuda_available"):
        errors = [f for f in report.get("findings") or [] if f.get("level") == "error"]
        if errors:
            return errors[0]["problem"], errors[0].get("fix") or "see `python -m gpucourse doctor`"
        return (
            "PyTorch sees no CUDA device (torch.cuda.is_available() is False)",
            "see `python -m gpucourse doctor`",
        )
    return None


def stop_message(problem: tuple[str, str]) -> str:
    why, fix = problem
    return (
        "make test-gpu: stopped before running anything: this machine cannot run the GPU path.\n"
        f"  why: {why}.\n  what to do: {fix}.\n  {CPU_ADVICE}"
    )


# ---- the machine's problems: each {"code", "problem", "fix", "needles"} (the lessons whose code
# holds a needle)
VISION_PROBE = (
    "import json, torch\nfacts = {'torch': torch.__version__, 'cuda': torch.version.cuda}\n"
    "try:\n    import torchvision\n    from torchvision.extension import _check_cuda_version\n"
    "    facts.update(torchvision=torchvision.__version__, vision_cuda=_check_cuda_version())\n"
    "except Exception as exc:\n    facts['error'] = f'{type(exc).__name__}: "
    "{exc}'\nprint(json.dumps(facts))\n"
)


def probe_torchvision(python: str = sys.executable) -> dict:
    """torch's and torchvision's versions and CUDA builds, or the error importing them, from
    ``python``."""
    try:
        done = subprocess.run(
            [python, "-c", VISION_PROBE], capture_output=True, text=True, timeout=300
        )
        return json.loads(done.stdout.strip().splitlines()[-1])
    except (OSError, subprocess.TimeoutExpired, json.JSONDecodeError, IndexError) as exc:
        return {"error": f"the probe did not run: {type(exc).__name__}: {exc}"}


def torchvision_problem(facts: dict) -> dict | None:
    """torchvision missing, failing, or built for another CUDA than torch (probe_torchvision's
    facts)."""
    if "torch" not in facts:
        return None  # no PyTorch: cuda_problem says so
    fix = (
        f"install the torchvision built with torch {facts['torch']} (the same CUDA; "
        "https://pytorch.org/get-started/previous-versions/ pairs them)"
    )
    if facts.get("error"):
        return {
            "code": "torchvision",
            "problem": f"torchvision cannot be used: {facts['error']}",
            "fix": fix,
        }
    built = facts.get("vision_cuda")
    if facts.get("cuda") and isinstance(built, int) and built <= 0:
        vision, cuda = facts["torchvision"], facts["cuda"]
        why = f"torchvision {vision} has no CUDA kernels beside torch's CUDA {cuda}"
        return {"code": "torchvision", "problem": why, "fix": fix}
    return None


def shm_problem(path: str = "/dev/shm", needed_mib: int = SHM_NEEDED_MIB) -> dict | None:
    """A /dev/shm smaller than the loader lessons' worker batches need (Docker gives 64 MB)."""
    try:
        stat = os.statvfs(path)
    except OSError:
        return (
            None
            if sys.platform != "linux"
            else {
                "code": "shm",
                "problem": f"{path} does not exist: DataLoader workers pass batches through it",
                "fix": "mount a tmpfs there (`docker run --shm-size=2g`, or `--ipc=host`)",
            }
        )
    size_mib = stat.f_frsize * stat.f_blocks / 2**20
    if size_mib >= needed_mib:
        return None
    return {
        "code": "shm",
        "problem": f"{path} holds {size_mib:.0f} MiB; DataLoader workers need about "
        f"{needed_mib} MiB "
        "(a bus error kills them)",
        "fix": "give the container more shared memory (`docker run --shm-size=2g`, or "
        "`--ipc=host`)",
    }


def managed_problem(
    stdlib: str | None = None, prefix: str = sys.prefix, base: str = sys.base_prefix
):
    """A Python whose environment pip may not install into (PEP 668 "externally managed"), outside a
    venv."""
    marker = Path(stdlib or sysconfig.get_paths()["stdlib"]) / "EXTERNALLY-MANAGED"
    if prefix != base or not marker.exists():
        return None
    return {
        "code": "externally-managed",
        "problem": f"{sys.executable}'s environment is externally managed (PEP 668): pip may not "
        "add to it",
        "fix": "run from a venv layered on it: `python3 -m venv --system-site-packages "
        "--without-pip "
        ".gpu-env`, then PYTHON=.gpu-env/bin/python (the GPU kit's command does this)",
    }


def compiler_problem(environ=os.environ, which=shutil.which, include: str | None = None):
    """No C compiler or no Python.h: torch.compile's Inductor and Triton build their launchers with
    them."""
    compiler = next(
        (which(c) for c in (environ.get("CC"), "gcc", "clang", "cc") if c and which(c)), None
    )
    headers = (Path(include or sysconfig.get_paths()["include"]) / "Python.h").exists()
    missing = [
        w
        for w, ok in (("C compiler ($CC, gcc or clang)", compiler), ("Python.h", headers))
        if not ok
    ]
    if not missing:
        return None
    return {
        "code": "compiler",
        "problem": f"no {' and no '.join(missing)}: torch.compile cannot build its kernels' "
        "launchers",
        "fix": "install them (`apt-get install build-essential python3-dev`, or your "
        "distribution's)",
    }


def machine_problems(vision: dict | None = None, **checks) -> list[dict]:
    """Every problem of the machine the lessons would otherwise report as their own failures."""
    found = [
        torchvision_problem(probe_torchvision() if vision is None else vision),
        checks.get("shm", shm_problem)(),
        checks.get("managed", managed_problem)(),
        checks.get("compiler", compiler_problem)(),
    ]
    return [{**p, **APPLIES[p["code"]]} for p in found if p]


# Which lessons a problem touches (their code holds a needle) and the failures it explains (a
# regex).
APPLIES = {
    "torchvision": {"needles": list(TORCHVISION_NEEDLES), "symptoms": r"torchvision"},
    "shm": {
        "needles": list(LOADER_NEEDLES),
        "symptoms": r"Bus error|shared memory|/dev/shm|DataLoader worker",
    },
    "externally-managed": {"needles": [], "symptoms": r"externally.managed"},
    "compiler": {
        "needles": ["torch.compile("],
        "symptoms": r"Python\.h|compiler|gcc|InductorError",
    },
}
