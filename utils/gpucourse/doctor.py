"""``python -m gpucourse doctor``: the environment report to paste into a bug, with a diagnosis;
exit status 1 on an error."""

import argparse
import importlib.metadata
import json
import os
import platform
import re
import sys
from collections import namedtuple

from . import __version__
from .device import probe_driver, visible_devices_problem
from .frameworks import course_set, load_tensorflow

FRAMEWORKS = {
    "torch": ("PyTorch", "torch"),
    "tensorflow": ("TensorFlow", "tensorflow", "tensorflow-cpu"),
    # key: (name in the report, its distributions)
    "dali": ("DALI", "nvidia-dali-cuda120", "nvidia-dali-cuda130"),
}
# per CUDA major, for all its minors: docs.nvidia.com/deploy/cuda-compatibility
MIN_DRIVER = {(12,): "525.60.13", (13,): "580"}
GPU_SET_FIX = (
    "Use the GPU set, where PyTorch, TensorFlow and DALI share CUDA 12: "
    "`make lab GPU=1` rebuilds .venv with it."
)
# no .venv on Colab
COLAB_FIX = (
    "Colab's runtime comes with it: Runtime > Disconnect and delete runtime starts a fresh one."
)
# level: "ok", "info", "warning" or "error"
Finding = namedtuple("Finding", "level problem fix", defaults=("",))


def _error(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}".strip()


def _version(text, parts: int = 2) -> tuple[int, ...]:
    return tuple(int(number) for number in re.findall(r"\d+", str(text))[:parts])


def probe_framework(key: str) -> dict:
    """What a framework ("torch", "tensorflow", "dali") is built for and the GPUs it sees; a
    failing import is its error."""
    installed = {
        (dist.metadata["Name"] or "").lower().replace("_", "-"): dist
        for dist in importlib.metadata.distributions()
    }
    name = next((name for name in FRAMEWORKS[key][1:] if name in installed), None)
    facts = {
        "installed": name is not None,
        "version": name and installed[name].version,
        "error": None,
    }
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
            facts.update(
                version=importlib.import_module("nvidia.dali").__version__,
                cuda=str(cuda_major(name, [])),
            )
    except Exception as exc:
        facts["error"] = _error(exc)
    return facts


def cuda_major(name: str, files: list[str]) -> int | None:
    """nvidia-cudnn-cu12 -> 12, nvidia-dali-cuda130 -> 13, CUDA 13's unsuffixed wheels (files in
    nvidia/cu13/) -> 13."""
    found = re.search(r"-cu(\d\d)$|-cuda(\d\d)\d$", name) or re.search(
        r"^nvidia/cu(\d\d)/", "\n".join(files), re.MULTILINE
    )
    return int(next(g for g in found.groups() if g)) if found else None


def runs_on(arch: list[str], capability: str) -> bool:
    """Whether a PyTorch built for ``arch`` (``torch.cuda.get_arch_list()``) has kernels for a
    GPU of ``capability``."""
    have = _version(capability)
    for kind, digits in (
        re.match(r"(sm|compute)_(\d+)", name).groups()
        for name in arch
        if re.match(r"(sm|compute)_\d", name)
    ):
        built = (int(digits[:-1]), int(digits[-1]))  # sm_86 -> (8, 6), sm_120 -> (12, 0)
        # a cubin runs on later minors, PTX on any later
        if built <= have and (kind == "compute" or built[0] == have[0]):
            return True
    return not arch  # nothing known: no claim


def probe_nvidia_packages() -> dict:
    """The installed nvidia-* wheels with the CUDA major of each, and library files that two of
    them claim."""
    packages, owners = {}, {}
    for dist in importlib.metadata.distributions():
        name = (dist.metadata["Name"] or "").lower().replace("_", "-")
        if name.startswith("nvidia-") and not name.startswith("nvidia-ml-py"):
            files = [str(f) for f in dist.files or [] if str(f).startswith("nvidia/")]
            packages[name] = cuda_major(name, files)
            for path in (f for f in files if ".so" in f or f.endswith(".dll")):
                owners.setdefault(path, []).append(name)
    return {
        "packages": packages,
        "clashes": {path: names for path, names in owners.items() if len(names) > 1},
    }


def collect() -> dict:
    facts = {
        "gpucourse": __version__,
        "python": platform.python_version(),
        "platform": platform.platform(),
        # the variable reaches `!python -m`;
        "colab": "google.colab" in sys.modules
        or "COLAB_RELEASE_TAG" in os.environ
        # Kaggle's image, built on Colab's, sets it too
        and "KAGGLE_KERNEL_RUN_TYPE" not in os.environ,
        "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
        "course_set": course_set(),
    }
    probes = {"driver": probe_driver, "nvidia": probe_nvidia_packages}
    for name in ("driver", *FRAMEWORKS, "nvidia"):
        try:
            facts[name] = probes[name]() if name in probes else probe_framework(name)
        # a probe's own bug becomes its error and never hides the other facts
        except Exception as exc:
            facts[name] = {"installed": False, "found": False, "error": _error(exc)}
    return facts


def diagnose(facts: dict) -> list[Finding]:
    """Plain findings, each with its fix, from the facts of ``collect()``."""
    findings: list[Finding] = []

    def add(level: str, problem: str, fix: str = "") -> None:
        findings.append(Finding(level, problem, fix))

    driver, nvidia, colab = (
        facts.get("driver") or {},
        facts.get("nvidia") or {},
        bool(facts.get("colab")),
    )
    as_shipped = (
        " This is Colab's runtime as Google ships it (its PyTorch runs with it): nothing to fix "
        "here." * colab
    )
    gpus = len(driver.get("gpus") or [])
    if not driver.get("found"):
        add(
            "info",
            f"No NVIDIA driver ({driver.get('error') or 'NVML did not start'}): the course runs on "
            "the CPU; TensorFlow's "
            'start-up lines "Could not find cuda drivers" and "failed call to cuInit" say only '
            "this.",
            "For a GPU on Colab: Runtime > Change runtime type; elsewhere install NVIDIA's driver "
            "until `nvidia-smi` lists it.",
        )
    elif not gpus:
        add("warning", "The NVIDIA driver is loaded but lists no GPU.", "Check `nvidia-smi`.")
    if hidden := gpus and visible_devices_problem(
        facts.get("cuda_visible_devices"), [g.get("uuid", "") for g in driver["gpus"]]
    ):
        add(
            "error",
            f"{hidden} (the driver sees {gpus} GPU(s)).",
            "Unset it (`unset CUDA_VISIBLE_DEVICES`, or `del os.environ"
            "['CUDA_VISIBLE_DEVICES']` before importing torch) or name GPUs by their UUIDs from "
            "`nvidia-smi -L`.",
        )
    working = {}  # label: facts of each framework that imports
    for key, (label, distribution, *_) in FRAMEWORKS.items():
        info = facts.get(key) or {}
        if not info.get("installed"):
            add(
                "info",
                f"{label} is not installed: its cells are skipped.",
                "`make lab` installs the course environment."
                if not colab
                else "Lesson 05's set-up cell installs it."
                if key == "dali"
                else COLAB_FIX,
            )
        elif info.get("error"):
            add(
                "error",
                f"{label} fails to import: {info['error']}",
                "Reinstall it: `pip install --force-reinstall "
                f"{distribution}=={info.get('version')}`.",
            )
        else:
            working[label] = info
    packages = nvidia.get("packages") or {}
    majors = {
        m: [name for name, k in sorted(packages.items()) if k == m]
        for m in sorted(set(packages.values()) - {None})
    }
    if len(majors) > 1:
        listed = "; ".join(f"CUDA {major}: {', '.join(names)}" for major, names in majors.items())
        add(
            "warning" if gpus and not colab else "info",
            f"Libraries of two CUDA majors are installed side by side ({listed}): "
            "a process that loads both can get the wrong cuBLAS, cuDNN or NCCL"
            + ("." if gpus else " (harmless without a GPU).")
            + as_shipped,
            GPU_SET_FIX if gpus and not colab else "",
        )
    if clashes := nvidia.get("clashes"):
        path, owners = sorted(clashes.items())[0]
        add(
            "info" if colab else "error",
            f"{len(clashes)} library file(s) belong to two packages, e.g. {path} ("
            f"{' and '.join(owners)}): the one installed last overwrote the other's.{as_shipped}",
            "" if colab else "Start afresh with one set: `rm -rf .venv && make lab`.",
        )
    if not gpus or hidden:
        return findings
    # does the driver run each framework's CUDA build, and does each framework see the GPUs?
    torch_, tf, cuda, version, old = (
        facts.get("torch", {}),
        facts.get("tensorflow", {}),
        driver["cuda"],
        driver["version"],
        {},
    )
    for label, build in (
        (label, info["cuda"]) for label, info in working.items() if info.get("cuda")
    ):
        need = MIN_DRIVER.get(_version(build, 1), "")
        if _version(cuda, 1) < _version(build, 1) or _version(version, 3) < _version(need, 3):
            old[label] = build, need
        elif _version(cuda) < _version(build):
            add(
                "info",
                f"{label}'s CUDA {build} is newer than the driver's {cuda}: it runs by "
                "minor-version compatibility.",
            )
    if old:
        add(
            "error",
            f"The NVIDIA driver {version} (CUDA up to {cuda}) is too old for "
            + ", ".join(
                f"{label} (built for CUDA {build}, which needs driver {need} or newer)"
                for label, (build, need) in old.items()
            ),
            f"Update the NVIDIA driver to {max((need for _, need in old.values()), key=_version)} "
            "or newer (nvidia.com/drivers).",
        )
    if "PyTorch" in working and "PyTorch" not in old:
        if not torch_.get("cuda"):
            add(
                "error",
                f"PyTorch {torch_.get('version')} is a CPU-only build, but the driver sees {gpus} "
                "GPU(s).",
                f"Install a build for CUDA {cuda} or older with the pip command at "
                "https://pytorch.org/get-started/locally/.",
            )
        elif left_out := [
            f"{g['name']} (compute capability {g['compute_capability']})"
            for g in driver["gpus"]
            if not runs_on(torch_.get("arch") or [], g["compute_capability"])
        ]:
            add(
                "error",
                f"PyTorch {torch_.get('version')} has no kernels for {', '.join(left_out)}: it is "
                "built for "
                f"{', '.join(torch_['arch'])}.",
                "Use the CPU set (`make lab GPU=0`) or Colab, or a PyTorch build whose "
                "architectures include this GPU's (https://pytorch.org/get-started/locally/).",
            )
        elif torch_.get("cuda_available"):
            add(
                "ok",
                f"PyTorch sees {len(torch_['devices'])} GPU(s): {', '.join(torch_['devices'])}.",
            )
        else:
            add(
                "error",
                f"PyTorch sees none of the {gpus} GPU(s): "
                f"{torch_.get('cuda_error') or 'CUDA does not start'}.",
                "`nvidia-smi` must work, and the GPU must not be in exclusive mode.",
            )
    if "TensorFlow" in working and "TensorFlow" not in old and not tf.get("gpus"):
        if str(facts.get("platform")).startswith("Windows"):
            add(
                "warning",
                f"TensorFlow {tf.get('version')} has no GPU support on native Windows since 2.11.",
                "Use WSL2 (Ubuntu in the Windows Subsystem for Linux) and `make lab` there; "
                "PyTorch uses the GPU on Windows.",
            )
        # its CUDA libraries are the cu12 wheels of its and-cuda extra, which break PyTorch's CUDA
        # 13 ones
        else:
            libraries = (
                "installed, so read `nvidia-smi`"
                if "nvidia-cudnn-cu12" in majors.get(12, [])
                else "missing"
            )
            add(
                "error",
                f"TensorFlow {tf.get('version')} sees no GPU: "
                + (
                    f"its CUDA libraries (nvidia-cudnn-cu12 and the "
                    f"other CUDA 12 wheels) are {libraries}."
                    if tf.get("is_cuda_build")
                    else "it is a CPU-only build."
                ),
                COLAB_FIX
                if colab
                else GPU_SET_FIX
                if 13 in majors or str(torch_.get("cuda")).startswith("13")
                else f"`pip install 'tensorflow[and-cuda]=={tf.get('version')}'` adds them (Linux, WSL2).",
            )
    return findings


def render(facts: dict, findings: list[Finding]) -> str:
    driver, visible = facts.get("driver") or {}, facts.get("cuda_visible_devices")
    lines = [
        f"gpucourse {facts.get('gpucourse')} environment report: Python {facts.get('python')} on "
        f"{facts.get('platform')}"
        f"{' (Colab)' * bool(facts.get('colab'))}, CUDA_VISIBLE_DEVICES "
        f"{'unset' if visible is None else repr(visible)}, "
        f"pinned set: {facts.get('course_set') or 'none (not made by `make`)'}",
        f"  NVIDIA driver {driver.get('version')}, supports CUDA up to {driver.get('cuda')}"
        if driver.get("found")
        else f"  NVIDIA driver: not found ({driver.get('error')})",
    ]
    lines += [
        f"    GPU {g['index']}: {g['name']}, {g['memory_gib']} GiB, compute capability "
        f"{g['compute_capability']}"
        for g in driver.get("gpus") or []
    ]
    for key, (label, *_) in FRAMEWORKS.items():
        info = facts.get(key) or {}
        seen = len(info["devices"]) if "devices" in info else info.get("gpus")
        about = (
            [f"FAILS TO IMPORT ({info['error']})"]
            if info.get("error")
            else [
                f"built for CUDA {info['cuda']}" if info.get("cuda") else "CPU-only build",
                info.get("cudnn") and f"cuDNN {info['cudnn']}",
                seen is not None and f"sees {seen} GPU(s)",
            ]
        )
        lines.append(
            f"  {label} {info['version']}, {', '.join(filter(None, about))}"
            if info.get("installed")
            else f"  {label}: not installed"
        )
    lines += ["Diagnosis:"] + [
        f"  [{f.level}] {f.problem}" + f"\n      fix: {f.fix}" * bool(f.fix) for f in findings
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m gpucourse doctor", description=__doc__)
    parser.add_argument("--json", action="store_true", help="print the facts and findings as JSON")
    as_json, facts = parser.parse_args(argv).json, collect()  # --help exits before the probes run
    findings = diagnose(facts)
    print(
        json.dumps(
            {"facts": facts, "findings": [f._asdict() for f in findings]}, indent=2, default=str
        )
        if as_json
        else render(facts, findings)
    )
    return 1 if any(f.level == "error" for f in findings) else 0
