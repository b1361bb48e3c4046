"""Choose the device, with a clear fallback, and read its facts.

``choose_device()`` is d2l's ``try_gpu`` with manners: it says which GPU it
took, or why it fell back to the CPU and how to get a GPU. With
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


def why_no_cuda() -> str:
    """A sentence on why PyTorch sees no CUDA device (call when it sees none)."""
    import torch

    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if torch.version.cuda is None:
        return f"this PyTorch ({torch.__version__}) is a CPU-only build"
    if visible is not None and visible.strip() in {"", "-1"}:
        return f"CUDA_VISIBLE_DEVICES={visible!r} hides every GPU (unset it to see them)"
    return "PyTorch finds no NVIDIA GPU and driver (torch.cuda.is_available() is False)"


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
