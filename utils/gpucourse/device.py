"""Choose the device (d2l's ``try_gpu``, saying why it fell back to the CPU), read its and the
driver's facts, size demos."""

import contextlib
import os
import platform
import re
import sys
from dataclasses import asdict, dataclass

# =1: a CPU fallback is an error, so a GPU runner cannot pass on the CPU
REQUIRE_GPU_VAR = "GPUCOURSE_REQUIRE_GPU"
# =float16: amp_dtype picks fp16 + GradScaler where it would pick bf16 (a T4's branch)
AMP_DTYPE_VAR = "GPUCOURSE_AMP_DTYPE"
# compute capabilities: CUDA C++ Programming Guide
TENSOR_CORES_FROM = (7, 0)
BF16_TF32_FROM = (8, 0)
FP8_FROM = (8, 9)
KERNELS_FROM = (7, 5)  # PyTorch's CUDA 12.8 and 13 builds: docs/pytorch-cuda-builds.toml
KERNELS_ADVICE = (  # for a GPU this PyTorch has no kernels for
    "PyTorch's CUDA 12.8 and 13 builds, which the course's sets install, start at Turing (compute "
    "capability 7.5); its CUDA 12.6 builds, up to 2.14, still cover Maxwell, Pascal and Volta. "
    "Without a build for this GPU the lessons run on the CPU, or on Colab's GPUs; "
    'docs/environments.md ("Older GPUs") says how to use a CUDA 12.6 build, at your own risk.'
)


class DeviceError(ValueError):
    """A device was asked for that this machine cannot give (lesson 02 catches it)."""


def on_colab() -> bool:
    """Whether this runs on Colab: its kernel imported google.colab, or a process it started
    (``!python -m gpucourse doctor``) inherited COLAB_RELEASE_TAG. Kaggle's image, built on
    Colab's, sets that variable too, and KAGGLE_KERNEL_RUN_TYPE besides: not Colab."""
    colab = "google.colab" in sys.modules or "COLAB_RELEASE_TAG" in os.environ
    return colab and "KAGGLE_KERNEL_RUN_TYPE" not in os.environ


def gpu_required() -> bool:
    return os.environ.get(REQUIRE_GPU_VAR, "").strip().lower() in {"1", "true", "yes", "on"}


def visible_devices_problem(visible: str | None, uuids: list[str]) -> str | None:
    """Why ``CUDA_VISIBLE_DEVICES=visible`` hides every GPU of a machine with these (NVML) UUIDs,
    else ``None``."""
    # CUDA reads the list up to its first invalid entry; PyTorch turns a repeated entry into an
    # empty list.
    if visible is not None and visible.strip() in {"", "-1"}:
        return f"CUDA_VISIBLE_DEVICES={visible!r} hides every GPU (unset it to see them)"
    entries = [entry.strip() for entry in (visible or "").split(",")]
    first = entries[0]
    kind = first[:4].upper()
    if visible is None or not uuids or kind == "MIG-" or (kind == "GPU-" and not all(uuids)):
        # no driver, a MIG instance (not in NVML's list of whole GPUs) or unknown UUIDs: no check
        return None
    matches = [uuid for uuid in uuids if uuid.lower().startswith(first.lower())]
    if kind == "GPU-" and len(matches) != 1:
        return (
            f"CUDA_VISIBLE_DEVICES={visible!r}: {first} "
            f"{'is ambiguous among' if matches else 'matches none of'} this "
            f"machine's GPUs ({', '.join(uuids)}), so none is visible; `nvidia-smi -L` lists them"
        )
    if kind != "GPU-" and (not first.isdigit() or int(first) >= len(uuids)):
        return (
            f"CUDA_VISIBLE_DEVICES={visible!r} names GPU {first!r}, "
            f"but this machine has {len(uuids)} GPU(s): none is visible"
        )
    return (
        f"CUDA_VISIBLE_DEVICES={visible!r} names a GPU twice: none is visible"
        if len(set(entries)) < len(entries)
        else None
    )


def probe_driver() -> dict:
    """The NVIDIA driver, the newest CUDA it supports and its GPUs, read through NVML
    (nvidia-ml-py)."""
    facts = {"found": False, "version": None, "cuda": None, "gpus": [], "error": None}
    try:
        import pynvml

        pynvml.nvmlInit()
        cuda = pynvml.nvmlSystemGetCudaDriverVersion()  # 12040 is CUDA 12.4
        facts.update(
            found=True,
            version=pynvml.nvmlSystemGetDriverVersion(),
            cuda=f"{cuda // 1000}.{cuda % 1000 // 10}",
        )
        handles = [
            pynvml.nvmlDeviceGetHandleByIndex(index) for index in range(pynvml.nvmlDeviceGetCount())
        ]
        facts["gpus"] = [
            {
                "index": index,
                "name": pynvml.nvmlDeviceGetName(handle),
                "memory_gib": round(pynvml.nvmlDeviceGetMemoryInfo(handle).total / 2**30, 2),
                "compute_capability": "{}.{}".format(
                    *pynvml.nvmlDeviceGetCudaComputeCapability(handle)
                ),
                "uuid": pynvml.nvmlDeviceGetUUID(handle),
            }
            for index, handle in enumerate(handles)
        ]
        pynvml.nvmlShutdown()
    except Exception as exc:  # ImportError without nvidia-ml-py, NVMLError without a driver
        facts["error"] = f"{type(exc).__name__}: {exc}".strip()
        if isinstance(exc, ImportError):
            facts["error"] = f"nvidia-ml-py is not installed: {facts['error']}"
    return facts


def why_no_cuda() -> str:
    """A sentence on why PyTorch sees no CUDA device (call when it sees none)."""
    import torch

    if torch.version.cuda is None:
        return f"this PyTorch ({torch.__version__}) is a CPU-only build"
    problem = visible_devices_problem(
        os.environ.get("CUDA_VISIBLE_DEVICES"), [gpu.get("uuid") for gpu in probe_driver()["gpus"]]
    )
    return problem or "PyTorch finds no NVIDIA GPU and driver (torch.cuda.is_available() is False)"


def why_no_pinning() -> str | None:
    """``None`` when pinned (page-locked) host memory works here, otherwise a sentence saying why
    not."""
    import torch

    if not torch.cuda.is_available():
        return f"pinned (page-locked) host memory needs CUDA, and {why_no_cuda()}"
    try:
        torch.empty(1).pin_memory()
    except RuntimeError as error:  # e.g. a container that limits locked memory (ulimit -l)
        return f"pinning host memory failed here ({error})"
    return None


def is_grading() -> bool:
    """True while nbgrader executes the notebook (autograde or validate): demos shrink to their
    grading size."""
    return bool(os.environ.get("NBGRADER_EXECUTION"))


def workload(device, *, cpu, gpu, grading=None, small_gpu=None):
    """A demo's size: ``cpu``/``gpu`` by device, ``grading`` (else ``cpu``) under nbgrader,
    ``small_gpu`` under 14 GiB."""
    import torch

    if is_grading():
        return cpu if grading is None else grading
    if torch.device(device).type != "cuda":
        return cpu
    return (
        small_gpu
        if small_gpu is not None
        and torch.cuda.get_device_properties(device).total_memory < 14 * 2**30
        else gpu
    )


def runs_on(arch: list[str], capability: tuple[int, int]) -> bool:
    """Whether a PyTorch built for ``arch`` (``torch.cuda.get_arch_list()``) has kernels for a GPU
    of ``capability``, e.g. (6, 1)."""
    for kind, major, minor in re.findall(r"\b(sm|compute)_(\d+)(\d)", " ".join(arch)):
        built = (int(major), int(minor))  # sm_86 -> (8, 6), sm_120 -> (12, 0), sm_90a -> (9, 0)
        # a cubin runs on later minors of its major, PTX on any later GPU
        if built <= tuple(capability) and (kind == "compute" or built[0] == capability[0]):
            return True
    return not arch  # nothing known: no claim


def choose_device(want: str | None = None, *, verbose: bool = True):
    """The current CUDA GPU, else the CPU with the reason; ``want`` ("cuda:1", "cpu", "meta") is
    checked and explained."""
    import torch

    if not re.fullmatch(r"(cuda|cpu|meta)(:\d+)?", "cuda" if want is None else str(want)):
        raise DeviceError(
            f"{want!r} is not a device this course uses: use 'cuda' or 'cuda:N', 'cpu', or 'meta' "
            "(shapes only)."
        )
    device = torch.device("cuda" if want is None else want)
    reason = None
    if device.type == "cuda" and not torch.cuda.is_available():
        reason, advice = why_no_cuda(), "Run `python -m gpucourse doctor` for a diagnosis."
        if on_colab():
            advice = "On Colab: Runtime > Change runtime type > T4 GPU, then Runtime > Run all."
    elif device.type == "cuda":
        count = torch.cuda.device_count()
        device = torch.device(
            "cuda", torch.cuda.current_device() if device.index is None else device.index
        )
        if device.index >= count:
            raise DeviceError(
                f"{want!r} asked for, but this machine shows {count} CUDA device(s) (those "
                "CUDA_VISIBLE_DEVICES leaves visible): "
                f"{', '.join(f'cuda:{i}' for i in range(count))}."
            )
        arch, capability = torch.cuda.get_arch_list(), torch.cuda.get_device_capability(device)
        if not runs_on(arch, capability):
            reason = (
                f"this PyTorch ({torch.__version__}) has no kernels for the "
                f"{torch.cuda.get_device_name(device)} (sm_{capability[0]}{capability[1]}): it "
                f"is built for {' '.join(arch)}"
            )
            advice = KERNELS_ADVICE
    if reason and want is not None:
        raise DeviceError(
            f"{want!r} asked for, but {reason}. {advice} choose_device() with no argument falls "
            "back to the CPU."
        )
    if reason and gpu_required():
        raise RuntimeError(f"{REQUIRE_GPU_VAR}=1 forbids the CPU fallback: {reason}.")
    if verbose and reason:
        print(f"No usable CUDA GPU: {reason}.")
        print("Falling back to the CPU: every lesson still runs, with smaller workloads.")
        print(advice)
    elif verbose:
        name = f": {torch.cuda.get_device_name(device)}" if device.type == "cuda" else ""
        print(f"Using {device}{name}.")
    return torch.device("cpu") if reason else device


@dataclass(frozen=True)
class DeviceFacts:  # what a lesson needs to know about the device it runs on
    device: str
    name: str
    compute_capability: tuple[int, int] | None
    total_memory_gib: float | None
    processors: int  # streaming multiprocessors on a GPU, logical cores on a CPU
    tensor_cores: bool = False
    tf32: bool = False
    bf16: bool = False  # bf16 runs natively fast (tensor cores, or AVX-512 BF16 / AMX on a CPU)
    fp8: bool = False
    colab: bool = False

    def __str__(self) -> str:
        return "\n".join(
            f"{key:<{max(map(len, asdict(self)))}}  {value}" for key, value in asdict(self).items()
        )


def device_facts(device=None) -> DeviceFacts:
    """Facts about ``device`` (default: the one ``choose_device`` would pick)."""
    import torch

    device = torch.device(device) if device is not None else choose_device(verbose=False)
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        cc = (props.major, props.minor)
        return DeviceFacts(
            str(device),
            props.name,
            cc,
            round(props.total_memory / 2**30, 2),
            props.multi_processor_count,
            cc >= TENSOR_CORES_FROM,
            cc >= BF16_TF32_FROM,
            cc >= BF16_TF32_FROM,
            cc >= FP8_FROM,
            on_colab(),
        )
    info = {}
    with contextlib.suppress(OSError), open("/proc/cpuinfo", encoding="utf-8") as f:  # Linux only
        info = {key.strip(): value.strip() for key, _, value in (line.partition(":") for line in f)}
    memory = (
        round(os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE") / 2**30, 2)
        if hasattr(os, "sysconf")
        else None
    )
    return DeviceFacts(
        str(device),
        info.get("model name") or platform.machine(),
        None,
        memory,
        os.cpu_count() or 1,
        bf16=bool(set(info.get("flags", "").split()) & {"avx512_bf16", "amx_bf16"}),
        colab=on_colab(),
    )


def amp_dtype(facts: DeviceFacts) -> tuple:
    """Lesson 04's rule, ``(dtype, use_scaler)``: bf16 on a CPU and from 8.0, fp16 + GradScaler
    on 7.x, else fp32. ``GPUCOURSE_AMP_DTYPE=float16`` takes a T4's branch where bf16 would be
    picked, so a newer GPU runs it too (docs/gpu-runner.md)."""
    import torch

    if facts.compute_capability is None or facts.compute_capability >= BF16_TF32_FROM:
        t4_branch = os.environ.get(AMP_DTYPE_VAR, "").strip() == "float16"
        return (torch.float16, True) if t4_branch else (torch.bfloat16, False)
    return (
        (torch.float16, True)
        if facts.compute_capability >= TENSOR_CORES_FROM
        else (torch.float32, False)
    )
