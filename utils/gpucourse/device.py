"""Choose the device (d2l's ``try_gpu``, saying why it fell back to the CPU), read its facts, size the demos for it.

With ``GPUCOURSE_REQUIRE_GPU=1`` a fallback is an error, so a GPU test runner cannot pass by quietly using the CPU.
"""

from __future__ import annotations

import os
import platform
import sys
from dataclasses import asdict, dataclass

REQUIRE_GPU_VAR = "GPUCOURSE_REQUIRE_GPU"

# What each compute capability adds: NVIDIA's CUDA C++ Programming Guide ("Compute Capabilities").
TENSOR_CORES_FROM = (7, 0)  # Volta: fp16 tensor cores
BF16_TF32_FROM = (8, 0)  # Ampere: bf16 and tf32 tensor cores
FP8_FROM = (8, 9)  # Ada Lovelace and Hopper: fp8 tensor cores


class DeviceError(ValueError):
    """A device was asked for that this machine cannot give (lesson 02 catches it)."""


class GPURequiredError(RuntimeError):
    """GPUCOURSE_REQUIRE_GPU=1 is set and no CUDA GPU is usable."""


def is_colab() -> bool:
    """True inside a Google Colab runtime."""
    return "google.colab" in sys.modules


def gpu_required() -> bool:
    """True when ``GPUCOURSE_REQUIRE_GPU`` asks for strict mode."""
    return os.environ.get(REQUIRE_GPU_VAR, "").strip().lower() in {"1", "true", "yes", "on"}


def visible_devices_problem(visible: str | None, uuids: list[str]) -> str | None:
    """Why ``CUDA_VISIBLE_DEVICES=visible`` hides every GPU of a machine with these (NVML) UUIDs, else ``None``."""
    # CUDA reads the list up to its first invalid entry; PyTorch turns a repeated entry into an empty list.
    if visible is None:
        return None
    entries = [entry.strip() for entry in visible.split(",")]
    if visible.strip() in {"", "-1"}:
        return f"CUDA_VISIBLE_DEVICES={visible!r} hides every GPU (unset it to see them)"
    first, count = entries[0], len(uuids)
    if first.upper().startswith("MIG-") or (first.upper().startswith("GPU-") and not all(uuids)):
        return None  # MIG instances are not in NVML's list of whole GPUs; unknown UUIDs: nothing to check against
    if first.upper().startswith("GPU-"):
        matches = [uuid for uuid in uuids if uuid.lower().startswith(first.lower())]
        if len(matches) != 1:
            which = "matches none of" if not matches else "is ambiguous among"
            return (f"CUDA_VISIBLE_DEVICES={visible!r}: {first} {which} this machine's GPUs "
                    f"({', '.join(uuids) or 'none'}), so no GPU is visible; `nvidia-smi -L` lists the UUIDs")
    elif not first.isdigit() or int(first) >= count:
        return (f"CUDA_VISIBLE_DEVICES={visible!r} names GPU {first!r}, but this machine has {count} GPU(s) "
                f"(indices 0 to {count - 1}); the list ends at the first GPU that does not exist, so none is visible")
    if len(set(entries)) < len(entries):
        return f"CUDA_VISIBLE_DEVICES={visible!r} names a GPU twice, and PyTorch then sees none"
    return None


def _nvml_uuids() -> list[str] | None:
    """The UUIDs of every GPU the driver sees (NVML ignores CUDA_VISIBLE_DEVICES), or None without a driver."""
    try:
        import pynvml

        pynvml.nvmlInit()
    except Exception:  # no nvidia-ml-py, or no driver: NVML raises its own NVMLError types
        return None
    try:  # nvidia-ml-py >= 12 returns str (pynvml.convertStrBytes)
        return [pynvml.nvmlDeviceGetUUID(pynvml.nvmlDeviceGetHandleByIndex(i)) for i in range(pynvml.nvmlDeviceGetCount())]
    finally:
        pynvml.nvmlShutdown()


def why_no_cuda() -> str:
    """A sentence on why PyTorch sees no CUDA device (call when it sees none)."""
    import torch

    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if torch.version.cuda is None:
        return f"this PyTorch ({torch.__version__}) is a CPU-only build"
    uuids = _nvml_uuids() if visible is not None else None
    problem = visible_devices_problem(visible, uuids or [])
    if problem and (uuids or visible.strip() in {"", "-1"}):
        return problem
    return "PyTorch finds no NVIDIA GPU and driver (torch.cuda.is_available() is False)"


def why_no_pinning() -> str | None:
    """``None`` when pinned (page-locked) host memory works here, otherwise a sentence saying why not."""
    import torch

    if not torch.cuda.is_available():
        return f"pinned (page-locked) host memory needs CUDA, and {why_no_cuda()}"
    try:
        torch.empty(1).pin_memory()
    except RuntimeError as error:  # e.g. a container that limits locked memory (ulimit -l)
        return f"pinning host memory failed here ({error})"
    return None


def is_grading() -> bool:
    """True while nbgrader executes the notebook (autograde or validate): demos shrink to their grading size."""
    return bool(os.environ.get("NBGRADER_EXECUTION"))


def workload(device, *, cpu, gpu, grading=None, small_gpu=None, gpu_gib: float = 14):
    """A demo's size: ``cpu``/``gpu`` by device type; ``grading`` (else ``cpu``) under nbgrader, ``small_gpu`` on a small GPU."""
    import torch

    if is_grading():
        return cpu if grading is None else grading
    if torch.device(device).type != "cuda":
        return cpu
    # a 16 GB T4 reports 14.7 GiB; 8 GB cards (RTX 3060/4060, laptops) get small_gpu when a lesson gives one
    if small_gpu is not None and torch.cuda.get_device_properties(device).total_memory / 2**30 < gpu_gib:
        return small_gpu
    return gpu


def choose_device(want: str | None = None, *, verbose: bool = True):
    """The current CUDA GPU, else the CPU with the reason; ``want`` ("cuda:1", "cpu", "meta") is checked and explained."""
    import torch

    if want is None and not torch.cuda.is_available():
        reason = why_no_cuda()
        if gpu_required():
            raise GPURequiredError(f"{REQUIRE_GPU_VAR}=1 forbids the CPU fallback, and there is no CUDA GPU: {reason}. "
                                   f"Unset {REQUIRE_GPU_VAR} to run on the CPU.")
        how = ("On Colab: Runtime > Change runtime type > a GPU (e.g. T4), then run this cell again." if is_colab()
               else "Run `python -m gpucourse doctor` for a diagnosis.")
        if verbose:
            print(f"No CUDA GPU: {reason}.\nFalling back to the CPU: every lesson still runs, with smaller workloads.\n{how}")
        return torch.device("cpu")
    try:
        device = torch.device("cuda" if want is None else want)
    except (RuntimeError, TypeError, ValueError):
        device = None
    if device is None or device.type not in {"cuda", "cpu", "meta"}:
        raise DeviceError(f"{want!r} is not a device this course uses. "
                          "Use 'cuda' (or 'cuda:0', 'cuda:1', ...) for an NVIDIA GPU, 'cpu', or 'meta' for shape-only tensors.")
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise DeviceError(f"{want!r} asked for, but {why_no_cuda()}. "
                              "Call gpucourse.choose_device() with no argument to fall back to the CPU.")
        count = torch.cuda.device_count()
        device = torch.device("cuda", torch.cuda.current_device() if device.index is None else device.index)
        if device.index >= count:
            raise DeviceError(f"{want!r} asked for, but this machine shows {count} CUDA device(s): "
                              + ", ".join(f"cuda:{i}" for i in range(count))
                              + ". Indices count only the GPUs that CUDA_VISIBLE_DEVICES leaves visible.")
    if verbose:
        print(f"Using {device}" + (f": {torch.cuda.get_device_name(device)}." if device.type == "cuda" else "."))
    return device


@dataclass(frozen=True)
class DeviceFacts:
    """What a lesson needs to know about the device it runs on."""

    device: str
    name: str
    compute_capability: tuple[int, int] | None
    total_memory_gib: float | None
    processors: int  # streaming multiprocessors on a GPU, logical cores on a CPU
    tensor_cores: bool
    tf32: bool
    bf16: bool  # bf16 runs natively fast (tensor cores, or AVX-512 BF16 / AMX on a CPU)
    fp8: bool
    colab: bool

    def __str__(self) -> str:
        facts = asdict(self)
        return "\n".join(f"{key:<{max(map(len, facts))}}  {value}" for key, value in facts.items())


def _cpu_name_and_flags() -> tuple[str, set[str]]:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            info = {key.strip(): value.strip() for key, _, value in (line.partition(":") for line in f)}
    except OSError:  # not Linux
        info = {}
    return info.get("model name") or platform.processor() or platform.machine(), set(info.get("flags", "").split())


def device_facts(device=None) -> DeviceFacts:
    """Facts about ``device`` (default: the one ``choose_device`` would pick)."""
    import torch

    device = torch.device(device) if device is not None else choose_device(verbose=False)
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        cc = (props.major, props.minor)
        return DeviceFacts(str(device), props.name, cc, round(props.total_memory / 2**30, 2), props.multi_processor_count,
                           tensor_cores=cc >= TENSOR_CORES_FROM, tf32=cc >= BF16_TF32_FROM, bf16=cc >= BF16_TF32_FROM,
                           fp8=cc >= FP8_FROM, colab=is_colab())
    name, flags = _cpu_name_and_flags()
    memory = None
    if "SC_PHYS_PAGES" in getattr(os, "sysconf_names", {}):
        memory = round(os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE") / 2**30, 2)
    return DeviceFacts(str(device), name, None, memory, os.cpu_count() or 1, tensor_cores=False, tf32=False,
                       bf16=bool(flags & {"avx512_bf16", "amx_bf16"}), fp8=False, colab=is_colab())


def amp_dtype(facts: DeviceFacts) -> tuple:
    """Lesson 04's rule, ``(dtype, use_scaler)``: bf16 on a CPU and from 8.0, fp16 + GradScaler on 7.x, else fp32."""
    import torch

    if facts.compute_capability is None or facts.compute_capability >= BF16_TF32_FROM:
        return torch.bfloat16, False
    if facts.compute_capability >= TENSOR_CORES_FROM:
        return torch.float16, True
    return torch.float32, False
