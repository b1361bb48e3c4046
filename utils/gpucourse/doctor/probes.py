"""The doctor's probes: what this machine has (driver, frameworks, NVIDIA wheels, /dev/shm), as
plain facts (a probe that fails reports its error and never hides the others), and what the checks
read in them."""

import importlib
import importlib.metadata
import os
import platform
import re

from .. import __version__, device
from ..device import on_colab, probe_driver, visible_devices_problem
from ..frameworks import course_set, load_tensorflow

# key: (name in the report, its distributions)
FRAMEWORKS = {
    "torch": ("PyTorch", "torch"),
    "tensorflow": ("TensorFlow", "tensorflow", "tensorflow-cpu"),
    "dali": ("DALI", "nvidia-dali-cuda120", "nvidia-dali-cuda130"),
}


def _error(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}".strip()


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


def _version(text, parts: int = 2) -> tuple[int, ...]:
    return tuple(int(number) for number in re.findall(r"\d+", str(text))[:parts])


# ------------------------------------------------------------------ what the checks read in facts
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
