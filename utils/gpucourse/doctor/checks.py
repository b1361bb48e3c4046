"""The doctor's diagnosis: a list of small checks, each ``_check_*(facts) -> list[Finding]``; a
finding's ``code`` is stable (tests and ``--json`` read it), its wording is for people."""

from dataclasses import dataclass

from .. import device
from .probes import (
    FRAMEWORKS,
    _gpu_usable,
    _gpus,
    _hidden,
    _left_out,
    _majors,
    _version,
    _working,
)

# The oldest driver per CUDA major, for all its minors: docs.nvidia.com/deploy/cuda-compatibility
MIN_DRIVER = {(12,): "525.60.13", (13,): "580"}
# Docker's default /dev/shm is 64 MiB; lesson 05's loader at GPU sizes needs 768 MiB (8 workers x 2
# prefetched x 48 MiB): warn below 1 GiB, ask for --shm-size=2g (one number in the course).
SMALL_SHM_MIB = 1024
GPU_SET_FIX = (
    "Use the GPU set, where PyTorch, TensorFlow and DALI share CUDA 12: "
    "`make lab GPU=1` rebuilds .venv with it."
)
COLAB_FIX = (  # there is no .venv on Colab
    "Colab's runtime comes with it: Runtime > Disconnect and delete runtime starts a fresh one."
)
AS_SHIPPED = (
    " This is Colab's runtime as Google ships it (its PyTorch runs with it): nothing to fix here."
)


@dataclass(frozen=True)
class Finding:
    code: str  # stable: "cpu_only_torch", "driver_too_old", ...
    level: str  # "ok", "info", "warning" or "error"
    problem: str
    fix: str = ""


def _too_old(facts: dict) -> dict[str, tuple[str, str]]:
    """Label -> (its CUDA build, the driver it needs), for each framework the driver cannot run."""
    driver = facts.get("driver") or {}
    old = {}
    for label, info in _working(facts).items():
        build = info.get("cuda")
        if not build:
            continue
        need = MIN_DRIVER.get(_version(build, 1), "")
        too_old_cuda = _version(driver.get("cuda"), 1) < _version(build, 1)
        if too_old_cuda or _version(driver.get("version"), 3) < _version(need, 3):
            old[label] = (build, need)
    return old


# ------------------------------------------------------------------ the checks
def _check_driver(facts: dict) -> list[Finding]:
    driver = facts.get("driver") or {}
    if not driver.get("found"):
        why = driver.get("error") or "NVML did not start"
        return [
            Finding(
                "no_driver",
                "info",
                f"No NVIDIA driver ({why}): the course runs on the CPU; TensorFlow's start-up "
                'lines "Could not find cuda drivers" and "failed call to cuInit" say only this.',
                "For a GPU on Colab: Runtime > Change runtime type; elsewhere install NVIDIA's "
                "driver until `nvidia-smi` lists it.",
            )
        ]
    if not _gpus(facts):
        return [
            Finding(
                "no_gpu_listed",
                "warning",
                "The NVIDIA driver is loaded but lists no GPU.",
                "Check `nvidia-smi`.",
            )
        ]
    return []


def _check_visible_devices(facts: dict) -> list[Finding]:
    hidden = _hidden(facts)
    if not hidden:
        return []
    empty = (facts.get("cuda_visible_devices") or "").strip() in {"", "-1"}
    return [
        Finding(
            "empty_visible_devices" if empty else "visible_devices_hide_gpus",
            "error",
            f"{hidden} (the driver sees {len(_gpus(facts))} GPU(s)).",
            "Unset it (`unset CUDA_VISIBLE_DEVICES`, or `del os.environ['CUDA_VISIBLE_DEVICES']` "
            "before importing torch) or name GPUs by their UUIDs from `nvidia-smi -L`.",
        )
    ]


def _check_frameworks(facts: dict) -> list[Finding]:
    findings = []
    for key, (label, distribution, *_) in FRAMEWORKS.items():
        info = facts.get(key) or {}
        if not info.get("installed"):
            if not facts.get("colab"):
                fix = "`make lab` installs the course environment."
            elif key == "dali":
                fix = "Lesson 05's set-up cell installs it."
            else:
                fix = COLAB_FIX
            problem = f"{label} is not installed: its cells are skipped."
            findings.append(Finding("framework_missing", "info", problem, fix))
        elif info.get("error"):
            findings.append(
                Finding(
                    "framework_import_error",
                    "error",
                    f"{label} fails to import: {info['error']}",
                    "Reinstall it: "
                    f"`pip install --force-reinstall {distribution}=={info.get('version')}`.",
                )
            )
    return findings


def _check_dev_shm(facts: dict) -> list[Finding]:
    shm = facts.get("shm") or {}
    total = shm.get("total_mib")
    if total is None or total >= SMALL_SHM_MIB:
        return []
    return [
        Finding(
            "small_dev_shm",
            "warning",
            f"{shm.get('path', '/dev/shm')} holds only {total} MiB (Docker gives a container 64 "
            "unless told otherwise): DataLoader workers (num_workers > 0, lessons 03 and 05) hand "
            "their batches over through it, and one that does not fit kills the worker with a "
            "bus error.",
            "Start the container with `--ipc=host` or `--shm-size=2g` or more (`docker run`, "
            "`podman run`), or set num_workers=0 in the loader cells.",
        )
    ]


def _check_cuda_majors(facts: dict) -> list[Finding]:
    majors = _majors(facts)
    if len(majors) < 2:
        return []
    colab = bool(facts.get("colab"))
    gpus = bool(_gpus(facts))
    listed = "; ".join(f"CUDA {major}: {', '.join(names)}" for major, names in majors.items())
    problem = (
        f"Libraries of two CUDA majors are installed side by side ({listed}): a process that "
        "loads both can get the wrong cuBLAS, cuDNN or NCCL"
    )
    problem += "." if gpus else " (harmless without a GPU)."
    if colab:
        problem += AS_SHIPPED
    if gpus and not colab:
        return [Finding("two_cuda_majors", "warning", problem, GPU_SET_FIX)]
    return [Finding("two_cuda_majors", "info", problem)]


def _check_library_clashes(facts: dict) -> list[Finding]:
    clashes = (facts.get("nvidia") or {}).get("clashes")
    if not clashes:
        return []
    path, owners = sorted(clashes.items())[0]
    problem = (
        f"{len(clashes)} library file(s) belong to two packages, e.g. {path} "
        f"({' and '.join(owners)}): the one installed last overwrote the other's."
    )
    if facts.get("colab"):
        return [Finding("library_file_clash", "info", problem + AS_SHIPPED)]
    fix = "Start afresh with one set: `rm -rf .venv && make lab`."
    return [Finding("library_file_clash", "error", problem, fix)]


def _check_driver_versions(facts: dict) -> list[Finding]:
    if not _gpu_usable(facts):
        return []
    driver = facts["driver"]
    findings = []
    old = _too_old(facts)
    for label, info in _working(facts).items():
        build = info.get("cuda")
        if build and label not in old and _version(driver["cuda"]) < _version(build):
            problem = (
                f"{label}'s CUDA {build} is newer than the driver's {driver['cuda']}: "
                "it runs by minor-version compatibility."
            )
            findings.append(Finding("minor_version_compat", "info", problem))
    if len(_left_out(facts)) == len(_gpus(facts)):  # no driver gives PyTorch kernels for them
        old.pop("PyTorch", None)
    if old:
        builds = ", ".join(
            f"{label} (built for CUDA {build}, which needs driver {need} or newer)"
            for label, (build, need) in old.items()
        )
        newest = max((need for _, need in old.values()), key=_version)
        problem = (
            f"The NVIDIA driver {driver['version']} (CUDA up to {driver['cuda']}) is too old "
            f"for {builds}"
        )
        fix = f"Update the NVIDIA driver to {newest} or newer (nvidia.com/drivers)."
        findings.append(Finding("driver_too_old", "error", problem, fix))
    return findings


def _check_torch_gpu(facts: dict) -> list[Finding]:
    if not _gpu_usable(facts) or "PyTorch" not in _working(facts):
        return []
    torch_ = facts["torch"]
    gpus = _gpus(facts)
    if left_out := _left_out(facts):  # whatever the driver: a newer one would not help
        problem = (
            f"PyTorch {torch_.get('version')} has no kernels for {', '.join(left_out)}: "
            f"it is built for {', '.join(torch_['arch'])}."
        )
        return [Finding("no_kernels_for_gpu", "error", problem, device.KERNELS_ADVICE)]
    if "PyTorch" in _too_old(facts):
        return []
    if not torch_.get("cuda"):
        problem = (
            f"PyTorch {torch_.get('version')} is a CPU-only build, but the driver sees "
            f"{len(gpus)} GPU(s)."
        )
        if min(_version(gpu["compute_capability"]) for gpu in gpus) < device.KERNELS_FROM:
            return [Finding("cpu_only_torch", "info", problem, device.KERNELS_ADVICE)]
        fix = (
            f"Install a build for CUDA {facts['driver']['cuda']} or older with the pip command at "
            "https://pytorch.org/get-started/locally/."
        )
        return [Finding("cpu_only_torch", "error", problem, fix)]
    if torch_.get("cuda_available"):
        devices = torch_.get("devices") or []
        problem = f"PyTorch sees {len(devices)} GPU(s): {', '.join(devices)}."
        return [Finding("torch_sees_gpus", "ok", problem)]
    why = torch_.get("cuda_error") or "CUDA does not start"
    problem = f"PyTorch sees none of the {len(gpus)} GPU(s): {why}."
    fix = "`nvidia-smi` must work, and the GPU must not be in exclusive mode."
    return [Finding("torch_cuda_fails", "error", problem, fix)]


def _check_tensorflow_gpu(facts: dict) -> list[Finding]:
    if not _gpu_usable(facts) or "TensorFlow" not in _working(facts):
        return []
    tf = facts["tensorflow"]
    if "TensorFlow" in _too_old(facts) or tf.get("gpus"):
        return []
    version = tf.get("version")
    if str(facts.get("platform")).startswith("Windows"):
        return [
            Finding(
                "tf_on_native_windows",
                "warning",
                f"TensorFlow {version} has no GPU support on native Windows since 2.11.",
                "Use WSL2 (Ubuntu in the Windows Subsystem for Linux) and `make lab` there; "
                "PyTorch uses the GPU on Windows.",
            )
        ]
    majors = _majors(facts)
    # its CUDA libraries are the cu12 wheels of its and-cuda extra; they break CUDA 13 ones
    if facts.get("colab"):
        fix = COLAB_FIX
    elif 13 in majors or str((facts.get("torch") or {}).get("cuda")).startswith("13"):
        fix = GPU_SET_FIX
    else:
        fix = f"`pip install 'tensorflow[and-cuda]=={version}'` adds them (Linux, WSL2)."
    if not tf.get("is_cuda_build"):
        problem = f"TensorFlow {version} sees no GPU: it is a CPU-only build."
        return [Finding("tf_cpu_only_build", "error", problem, fix)]
    if "nvidia-cudnn-cu12" in majors.get(12, []):
        libraries = "installed, so read `nvidia-smi`"
    else:
        libraries = "missing"
    problem = (
        f"TensorFlow {version} sees no GPU: its CUDA libraries (nvidia-cudnn-cu12 and the other "
        f"CUDA 12 wheels) are {libraries}."
    )
    return [Finding("tf_without_cuda", "error", problem, fix)]


CHECKS = [
    _check_driver,
    _check_visible_devices,
    _check_frameworks,
    _check_dev_shm,
    _check_cuda_majors,
    _check_library_clashes,
    _check_driver_versions,
    _check_torch_gpu,
    _check_tensorflow_gpu,
]


def diagnose(facts: dict) -> list[Finding]:
    """Plain findings, each with its fix, from the facts of ``collect()``."""
    return [finding for check in CHECKS for finding in check(facts)]
