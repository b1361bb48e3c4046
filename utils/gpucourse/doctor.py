"""``python -m gpucourse doctor``: the environment report to paste into a bug, with a diagnosis.

The diagnosis is a list of small checks, each ``_check_*(facts) -> list[Finding]``; a finding's
``code`` is stable (tests and ``--json`` read it), its wording is for people. Exit status 1 on an
error.
"""

import argparse
import importlib.metadata
import json
import os
import platform
import re
from dataclasses import asdict, dataclass

from . import __version__, device
from .device import on_colab, probe_driver, visible_devices_problem
from .frameworks import course_set, load_tensorflow

# key: (name in the report, its distributions)
FRAMEWORKS = {
    "torch": ("PyTorch", "torch"),
    "tensorflow": ("TensorFlow", "tensorflow", "tensorflow-cpu"),
    "dali": ("DALI", "nvidia-dali-cuda120", "nvidia-dali-cuda130"),
}
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


def _error(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}".strip()


def _version(text, parts: int = 2) -> tuple[int, ...]:
    return tuple(int(number) for number in re.findall(r"\d+", str(text))[:parts])


def cuda_major(name: str, version: str = "", files=()) -> int | None:
    """The CUDA major a package is built for, or None when nothing says (nvidia-ml-py, numpy).

    Read in this order: the name's suffix (nvidia-cudnn-cu12 -> 12, nvidia-dali-cuda130 -> 13),
    PyTorch's local version (2.11.0+cu128 -> 12), the installed files (CUDA 13's wheels put theirs
    in nvidia/cu13/), and last CUDA 13's naming: its toolkit wheels (nvidia-cublas,
    nvidia-cuda-runtime, nvidia-nvjitlink, ...) dropped the suffix that every CUDA 12 one has.
    """
    found = (
        re.search(r"[-_]cu(\d\d)$", name, re.I)
        or re.search(r"[-_]cuda(\d\d)\d$", name, re.I)
        or re.search(r"\+cu(\d\d)\d$", version)
        or re.search(r"^nvidia/cu(\d\d)/", "\n".join(map(str, files)), re.M)
    )
    if found:
        return int(found.group(1))
    if re.match(r"nvidia[-_](cu|nv|npp)", name, re.I):
        return 13
    return None


def probe_framework(key: str) -> dict:
    """What a framework ("torch", "tensorflow", "dali") is built for and the GPUs it sees; a failing
    import is its error."""
    name = version = None
    for candidate in FRAMEWORKS[key][1:]:
        try:
            version = importlib.metadata.version(candidate)  # matches any spelling of the name
        except importlib.metadata.PackageNotFoundError:
            continue
        name = candidate
        break
    facts = {"installed": name is not None, "version": version, "error": None}
    try:
        if name == "torch":
            import torch

            facts.update(
                version=torch.__version__,
                cuda=torch.version.cuda,
                cudnn=torch.backends.cudnn.version(),
                cuda_available=torch.cuda.is_available(),
                arch=torch.cuda.get_arch_list(),
                devices=[torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())],
            )
            if facts["cuda"] and not facts["cuda_available"]:
                try:
                    torch.cuda.init()  # raises the reason CUDA does not start
                except Exception as exc:
                    facts["cuda_error"] = _error(exc)
        elif name and key == "tensorflow":
            # quietly: its C++ start-up lines would come before the report
            tf, gpus = load_tensorflow()
            build = tf.sysconfig.get_build_info()
            facts.update(
                version=tf.__version__,
                is_cuda_build=bool(build.get("is_cuda_build")),
                gpus=len(gpus),
                cuda=build.get("cuda_version"),
                cudnn=build.get("cudnn_version"),
            )
        elif name:
            dali = importlib.import_module("nvidia.dali")
            facts.update(version=dali.__version__, cuda=str(cuda_major(name)))
    except Exception as exc:
        facts["error"] = _error(exc)
    return facts


def probe_nvidia_packages() -> dict:
    """The installed nvidia-* wheels with the CUDA major of each, and library files that two of
    them claim."""
    packages = {}
    owners = {}
    for dist in importlib.metadata.distributions():
        # PEP 503's spelling, as coursetools.pins.package_name writes it (learners lack the tools)
        name = re.sub(r"[-_.]+", "-", dist.metadata["Name"] or "").lower()
        if name.startswith("nvidia-") and not name.startswith("nvidia-ml-py"):
            files = [str(f) for f in dist.files or [] if str(f).startswith("nvidia/")]
            packages[name] = cuda_major(name, dist.version, files)
            for path in files:
                if ".so" in path or path.endswith(".dll"):
                    owners.setdefault(path, []).append(name)
    clashes = {path: names for path, names in owners.items() if len(names) > 1}
    return {"packages": packages, "clashes": clashes}


def probe_shm(path: str = "/dev/shm") -> dict | None:
    """The size of the shared memory DataLoader and DALI workers hand batches over through; None
    where there is no such file system (macOS, Windows)."""
    try:
        stat = os.statvfs(path)
    except (OSError, AttributeError):
        return None
    return {"path": path, "total_mib": stat.f_frsize * stat.f_blocks // 2**20}


def collect() -> dict:
    facts = {
        "gpucourse": __version__,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "colab": on_colab(),
        "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
        "course_set": course_set(),
    }
    probes = {"driver": probe_driver, "nvidia": probe_nvidia_packages, "shm": probe_shm}
    for name in ("driver", *FRAMEWORKS, "nvidia", "shm"):
        try:
            facts[name] = probes[name]() if name in probes else probe_framework(name)
        # a probe's own bug becomes its error and never hides the other facts
        except Exception as exc:
            facts[name] = {"installed": False, "found": False, "error": _error(exc)}
    return facts


# ------------------------------------------------------------------ what the checks share
def _gpus(facts: dict) -> list[dict]:
    return (facts.get("driver") or {}).get("gpus") or []


def _hidden(facts: dict) -> str | None:
    """Why CUDA_VISIBLE_DEVICES hides every GPU the driver lists, else None."""
    uuids = [gpu.get("uuid", "") for gpu in _gpus(facts)]
    if not uuids:
        return None
    return visible_devices_problem(facts.get("cuda_visible_devices"), uuids)


def _working(facts: dict) -> dict[str, dict]:
    """Label ("PyTorch") -> facts, for each framework that is installed and imports."""
    working = {}
    for key, (label, *_) in FRAMEWORKS.items():
        info = facts.get(key) or {}
        if info.get("installed") and not info.get("error"):
            working[label] = info
    return working


def _majors(facts: dict) -> dict[int, list[str]]:
    """CUDA major -> the nvidia-* packages built for it."""
    packages = (facts.get("nvidia") or {}).get("packages") or {}
    majors: dict[int, list[str]] = {}
    for name, major in sorted(packages.items()):
        if major is not None:
            majors.setdefault(major, []).append(name)
    return dict(sorted(majors.items()))


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


def _left_out(facts: dict) -> list[str]:
    """The GPUs the PyTorch build has no kernels for (its ``torch.cuda.get_arch_list()``)."""
    arch = (facts.get("torch") or {}).get("arch") or []
    return [
        f"{gpu['name']} (compute capability {gpu['compute_capability']})"
        for gpu in _gpus(facts)
        if not device.runs_on(arch, _version(gpu["compute_capability"]))
    ]


def _gpu_usable(facts: dict) -> bool:
    """A GPU is there and visible: the checks of the frameworks' GPU support apply."""
    return bool(_gpus(facts)) and not _hidden(facts)


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


# ------------------------------------------------------------------ the report
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
    parser = argparse.ArgumentParser(prog="python -m gpucourse doctor", description=__doc__)
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
