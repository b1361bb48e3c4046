"""Choose the device, with a clear fallback, and read its facts.

``choose_device()`` is d2l's ``try_gpu`` with manners: it says which GPU it
took, or why it fell back to the CPU and how to get a GPU (``why_no_cuda``,
which also spots a ``CUDA_VISIBLE_DEVICES`` naming GPUs that do not exist).
``workload()`` picks each demo's size for the device, so every lesson runs in
about a minute on a 2-core CPU and still shows the real effect on a GPU. With
``GPUCOURSE_REQUIRE_GPU=1`` in the environment a fallback is an error, so a
GPU test runner cannot pass by quietly running on the CPU.
"""

from __future__ import annotations

import os
import platform
import sys
from dataclasses import asdict, dataclass

REQUIRE_GPU_VAR = "GPUCOURSE_REQUIRE_GPU"

# What each compute capability (major, minor) adds, from NVIDIA's CUDA C++
# Programming Guide ("Compute Capabilities") and the architecture whitepapers.
TENSOR_CORES_FROM = (7, 0)  # Volta: fp16 tensor cores
BF16_TF32_FROM = (8, 0)  # Ampere: bf16 and tf32 tensor cores
FP8_FROM = (8, 9)  # Ada Lovelace and Hopper: fp8 tensor cores


class DeviceError(ValueError):
    """A device was asked for that this machine cannot give."""


class GPURequiredError(RuntimeError):
    """GPUCOURSE_REQUIRE_GPU=1 is set and no CUDA GPU is usable."""


def is_colab() -> bool:
    """True inside a Google Colab runtime."""
    return "google.colab" in sys.modules


def gpu_required() -> bool:
    """True when ``GPUCOURSE_REQUIRE_GPU`` asks for strict mode."""
    return os.environ.get(REQUIRE_GPU_VAR, "").strip().lower() in {"1", "true", "yes", "on"}


def visible_devices_problem(visible: str | None, uuids: list[str]) -> str | None:
    """Why ``CUDA_VISIBLE_DEVICES=visible`` leaves no GPU visible on a machine whose GPUs (in NVML's
    order) have these UUIDs; ``None`` when it leaves some. CUDA reads the list up to its first invalid
    entry (an index past the count, a UUID no GPU has); PyTorch turns a repeated entry into an empty list."""
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
    try:
        uuids = [pynvml.nvmlDeviceGetUUID(pynvml.nvmlDeviceGetHandleByIndex(i)) for i in range(pynvml.nvmlDeviceGetCount())]
        return [uuid.decode() if isinstance(uuid, bytes) else uuid for uuid in uuids]
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


def _gpu_memory_gib(device) -> float:
    import torch

    return torch.cuda.get_device_properties(device).total_memory / 2**30


def workload(device, *, cpu, gpu, grading=None, small_gpu=None, gpu_gib: float = 14):
    """The size of a demo for ``device``: lessons never hard-code one.

    ``cpu`` is the size for a CPU (and while grading, unless ``grading`` is
    given), ``gpu`` the size for a CUDA GPU with at least ``gpu_gib`` GiB of
    memory (a 16 GB T4 reports 14.7 GiB), and ``small_gpu`` the size for a
    smaller GPU (8 GB laptops and RTX 3060/4060-class cards); without it,
    every GPU gets ``gpu``.
    """
    if is_grading():
        return cpu if grading is None else grading
    kind = getattr(device, "type", None) or str(device).split(":")[0]
    if kind != "cuda":
        return cpu
    if small_gpu is not None and _gpu_memory_gib(device) < gpu_gib:
        return small_gpu
    return gpu


def _fallback_message(reason: str) -> str:
    lines = [f"No CUDA GPU: {reason}.", "Falling back to the CPU: every lesson still runs, with smaller workloads."]
    if is_colab():
        lines.append("On Colab: Runtime > Change runtime type > a GPU (e.g. T4), then run this cell again.")
    else:
        lines.append("Run `python -m gpucourse doctor` for a diagnosis.")
    return "\n".join(lines)


def choose_device(want: str | None = None, *, verbose: bool = True):
    """Return the ``torch.device`` a lesson should use.

    ``want=None`` takes the current CUDA GPU when there is one and otherwise
    falls back to the CPU, saying why. ``want`` may name a device ("cuda",
    "cuda:1", "cpu", "meta"): it is checked and explained if this machine
    cannot give it. With ``GPUCOURSE_REQUIRE_GPU=1`` a fallback raises
    ``GPURequiredError`` instead.
    """
    import torch

    if want is None:
        if torch.cuda.is_available():
            device = torch.device("cuda", torch.cuda.current_device())
            if verbose:
                print(f"Using {device}: {torch.cuda.get_device_name(device)}.")
            return device
        reason = why_no_cuda()
        if gpu_required():
            raise GPURequiredError(
                f"{REQUIRE_GPU_VAR}=1 forbids the CPU fallback, and there is no CUDA GPU: {reason}. "
                f"Unset {REQUIRE_GPU_VAR} to run on the CPU."
            )
        if verbose:
            print(_fallback_message(reason))
        return torch.device("cpu")

    try:
        device = torch.device(want)
    except (RuntimeError, TypeError, ValueError):
        raise DeviceError(
            f"{want!r} is not a device name PyTorch knows. "
            "Use 'cuda' (or 'cuda:0', 'cuda:1', ...) for an NVIDIA GPU, 'cpu', or 'meta' for shape-only tensors."
        ) from None
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise DeviceError(
                f"{want!r} asked for, but {why_no_cuda()}. "
                "Call gpucourse.choose_device() with no argument to fall back to the CPU."
            )
        count = torch.cuda.device_count()
        index = torch.cuda.current_device() if device.index is None else device.index
        if index >= count:
            raise DeviceError(
                f"{want!r} asked for, but this machine shows {count} CUDA device(s): "
                + ", ".join(f"cuda:{i}" for i in range(count))
                + ". Indices count only the GPUs that CUDA_VISIBLE_DEVICES leaves visible."
            )
        device = torch.device("cuda", index)
    elif device.type not in {"cpu", "meta"}:
        accelerator = torch.accelerator.current_accelerator(check_available=True)
        if accelerator is None or accelerator.type != device.type:
            raise DeviceError(
                f"{want!r} asked for, but this machine has no usable {device.type!r} device. "
                "This course uses 'cuda' for NVIDIA GPUs, 'cpu', or 'meta' for shape-only tensors; "
                "call gpucourse.choose_device() with no argument for the CUDA GPU if there is one, else the CPU."
            )
    if verbose:
        print(f"Using {device}.")
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

    def as_dict(self) -> dict:
        return asdict(self)

    def __str__(self) -> str:
        width = max(map(len, self.as_dict()))
        return "\n".join(f"{key:<{width}}  {value}" for key, value in self.as_dict().items())


def _cpu_name_and_flags() -> tuple[str, set[str]]:
    name, flags = platform.processor() or platform.machine(), set()
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                key, _, value = line.partition(":")
                if key.strip() == "model name" and value.strip():
                    name = value.strip()
                elif key.strip() == "flags":
                    flags = set(value.split())
                    break
    except OSError:
        pass
    return name, flags


def device_facts(device=None) -> DeviceFacts:
    """Facts about ``device`` (default: the one ``choose_device`` would pick)."""
    import torch

    device = torch.device(device) if device is not None else choose_device(verbose=False)
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        capability = (props.major, props.minor)
        return DeviceFacts(
            device=str(device),
            name=props.name,
            compute_capability=capability,
            total_memory_gib=round(props.total_memory / 2**30, 2),
            processors=props.multi_processor_count,
            tensor_cores=capability >= TENSOR_CORES_FROM,
            tf32=capability >= BF16_TF32_FROM,
            bf16=capability >= BF16_TF32_FROM,
            fp8=capability >= FP8_FROM,
            colab=is_colab(),
        )
    name, flags = _cpu_name_and_flags()
    memory = None
    if hasattr(os, "sysconf") and "SC_PHYS_PAGES" in os.sysconf_names:
        memory = round(os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE") / 2**30, 2)
    return DeviceFacts(
        device=str(device),
        name=name,
        compute_capability=None,
        total_memory_gib=memory,
        processors=os.cpu_count() or 1,
        tensor_cores=False,
        tf32=False,
        bf16=bool(flags & {"avx512_bf16", "amx_bf16"}),
        fp8=False,
        colab=is_colab(),
    )


def amp_dtype(facts: DeviceFacts) -> tuple:
    """``(dtype, use_scaler)`` for ``torch.autocast`` on the device ``facts`` describe (lesson 04's rule).

    bf16 without a scaler from compute capability 8.0 and on a CPU; fp16 with a
    ``GradScaler`` on 7.x (V100, T4); float32, autocast off, before tensor cores.
    """
    import torch

    if facts.compute_capability is None or facts.compute_capability >= BF16_TF32_FROM:
        return torch.bfloat16, False
    if facts.compute_capability >= TENSOR_CORES_FROM:
        return torch.float16, True
    return torch.float32, False
