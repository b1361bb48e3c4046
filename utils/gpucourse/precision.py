"""Mixed precision: pick the autocast dtype for a device, and explain bad choices.

The course's rule, from the device's compute capability (``device_facts``):

============================ ============ ========== =======================================
device                       autocast     GradScaler why
============================ ============ ========== =======================================
GPU, compute capability 8.0+ bfloat16     no         bf16 tensor cores; fp32's range
GPU, 7.0 to 7.x (V100, T4)   float16      yes        fp16 tensor cores, no fast bf16
GPU before 7.0               off (fp32)   no         no tensor cores: nothing to gain
CPU                          bfloat16     no         the only dtype CPU autocast is made for
============================ ============ ========== =======================================

``amp_plan(device)`` applies it and returns an ``AmpPlan`` that opens the
autocast context and makes the matching ``torch.amp.GradScaler``, so one
training loop does the right thing on a T4, an H100 and a CPU. Asking for a
dtype the device cannot run well (bf16 on a T4, fp16 on the CPU), or using a
CUDA scaler with CPU tensors, raises ``PrecisionError`` with the reason and
the fix instead of a slow run or a silently unscaled one.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import TYPE_CHECKING

from .device import BF16_TF32_FROM, FP8_FROM, TENSOR_CORES_FROM, DeviceFacts, device_facts

if TYPE_CHECKING:
    import torch

NAMES = {
    "bf16": "bfloat16", "bfloat16": "bfloat16",
    "fp16": "float16", "float16": "float16", "half": "float16",
    "fp32": "float32", "float32": "float32", "float": "float32",
}  # fmt: skip


class PrecisionError(ValueError):
    """A precision was asked for that this device cannot run well, or a scaler that does not fit."""


def as_dtype(want) -> torch.dtype:
    """``"bf16"``, ``"fp16"``, ``"fp32"`` (or a ``torch.dtype``) as a ``torch.dtype``."""
    import torch

    if isinstance(want, torch.dtype):
        name = str(want).removeprefix("torch.")
    else:
        name = NAMES.get(str(want).strip().lower(), "")
    if name not in {"bfloat16", "float16", "float32"}:
        raise PrecisionError(
            f"{want!r} is not a precision for autocast. Ask for 'bf16', 'fp16' or 'fp32' "
            "(TF32 is not a dtype: it is a math mode of fp32, see fp32_math)."
        )
    return getattr(torch, name)


@dataclass(frozen=True)
class AmpPlan:
    """The precision a training loop should use on one device."""

    device_type: str  # "cuda" or "cpu": the device_type of torch.autocast
    dtype: torch.dtype  # the autocast dtype; float32 means autocast is off
    use_scaler: bool  # True for fp16 on a GPU: loss scaling keeps small gradients alive
    reason: str

    @property
    def enabled(self) -> bool:
        import torch

        return self.dtype != torch.float32

    def autocast(self):
        """``torch.autocast`` for this plan (a no-op context when autocast is off)."""
        import torch

        if not self.enabled:
            return contextlib.nullcontext()
        return torch.autocast(device_type=self.device_type, dtype=self.dtype)

    def grad_scaler(self) -> torch.amp.GradScaler:
        """A ``torch.amp.GradScaler``, enabled only where this plan needs one (fp16 on a GPU).

        A disabled scaler turns ``scale``, ``unscale_`` and ``update`` into no-ops
        and ``step`` into ``optimizer.step()``: one loop serves every plan.
        """
        import torch

        return torch.amp.GradScaler(self.device_type, enabled=self.use_scaler)

    def __str__(self) -> str:
        if not self.enabled:
            return f"float32 on {self.device_type}, autocast off: {self.reason}"
        scaler = "with" if self.use_scaler else "without"
        name = str(self.dtype).removeprefix("torch.")
        return f"{name} autocast on {self.device_type}, {scaler} a GradScaler: {self.reason}"


def describe_gpu(name: str, capability: tuple[int, int], memory_gib: float | None = None) -> DeviceFacts:
    """``DeviceFacts`` for a GPU you do not have: plan for a T4 while sitting at a CPU."""
    capability = tuple(capability)
    return DeviceFacts(
        device="cuda:0",
        name=name,
        compute_capability=capability,
        total_memory_gib=memory_gib,
        processors=0,
        tensor_cores=capability >= TENSOR_CORES_FROM,
        tf32=capability >= BF16_TF32_FROM,
        bf16=capability >= BF16_TF32_FROM,
        fp8=capability >= FP8_FROM,
        colab=False,
    )


def _label(facts: DeviceFacts) -> str:
    major, minor = facts.compute_capability or (0, 0)
    return f"{facts.name} (compute capability {major}.{minor})"


def amp_plan(device=None, want=None, *, facts: DeviceFacts | None = None) -> AmpPlan:
    """The autocast dtype and scaler for ``device`` (default: ``choose_device()``'s).

    ``want=None`` (or ``"auto"``) picks by the table in this module's docstring;
    ``want="bf16" | "fp16" | "fp32"`` asks for one and is refused, with the
    reason and the fix, where the device cannot run it well. ``facts`` plans for
    a described device instead (see ``describe_gpu``).
    """
    import torch

    facts = facts if facts is not None else device_facts(device)
    device_type = torch.device(facts.device).type
    wanted = None if want is None or str(want).lower() == "auto" else as_dtype(want)
    fp32 = torch.float32

    if wanted == fp32:
        return AmpPlan(device_type, fp32, False, "float32 asked for")
    if device_type == "cuda":
        cc = facts.compute_capability or (0, 0)
        if wanted == torch.bfloat16 and cc < BF16_TF32_FROM:
            raise PrecisionError(
                f"bf16 asked for on {_label(facts)}, which has no bf16 tensor cores: they start at compute "
                "capability 8.0 (Ampere: A100, A10G, RTX 30xx). Here bf16 runs without them, no faster than fp32. "
                "Use fp16 with a GradScaler instead: amp_plan(device) picks it for you."
            )
        if wanted == torch.bfloat16 or (wanted is None and cc >= BF16_TF32_FROM):
            why = f"{_label(facts)} has bf16 tensor cores; bf16 keeps fp32's range, so no loss scaling"
            return AmpPlan("cuda", torch.bfloat16, False, why)
        if wanted == torch.float16 or cc >= TENSOR_CORES_FROM:
            speed = "fp16 tensor cores" if cc >= TENSOR_CORES_FROM else "no tensor cores (fp16 saves memory, not time)"
            why = "fp16 asked for" if wanted == torch.float16 else "no fast bf16"
            why = f"{_label(facts)}: {speed}, {why}; fp16's narrow range needs loss scaling"
            return AmpPlan("cuda", torch.float16, True, why)
        return AmpPlan("cuda", fp32, False, f"{_label(facts)} has no tensor cores: mixed precision would not be faster")
    if device_type == "cpu":
        if wanted == torch.float16:
            raise PrecisionError(
                "fp16 asked for on the CPU. CPUs have no fast fp16 arithmetic, and fp16's narrow range would need a "
                "GradScaler. The CPU's mixed precision is bf16 (torch.autocast(device_type='cpu') defaults to it): "
                "fp32's range, no scaler. Ask for 'bf16', or leave want=None."
            )
        native = "this CPU has native bf16 instructions (AVX-512 BF16 or AMX)" if facts.bf16 else (
            "this CPU has no native bf16 instructions (AVX-512 BF16 or AMX), so bf16 is converted in software "
            "and is usually slower than fp32 here; it still shows what autocast does"
        )
        return AmpPlan("cpu", torch.bfloat16, False, f"CPU autocast is made for bf16; {native}")
    if wanted is not None:
        raise PrecisionError(
            f"the course's precision rules cover 'cuda' and 'cpu' devices, not {device_type!r}: "
            "use want='fp32' or no want there."
        )
    return AmpPlan(device_type, fp32, False, f"no autocast rules for {device_type!r} in this course")


def grad_scaler(device=None, dtype=None) -> torch.amp.GradScaler:
    """The scaler for training on ``device`` in ``dtype`` (default: ``amp_plan(device)``'s).

    Enabled for fp16 on a GPU only; for bf16 and fp32 it is disabled, so the
    same ``scaler.scale(loss).backward(); scaler.step(opt); scaler.update()``
    loop works everywhere. fp16 on the CPU is refused with the reason.
    """
    plan = amp_plan(device, want=dtype)
    return plan.grad_scaler()


def check_scaler(scaler, *tensors) -> None:
    """Raise ``PrecisionError`` when ``scaler`` does not fit the device of ``tensors`` (e.g. the loss).

    The classic mistake is a ``GradScaler("cuda")`` copied into a loop that runs
    on the CPU: without CUDA, PyTorch disables the scaler with a warning and an
    fp16 loop then runs unscaled; with CUDA, the scale lands on the wrong device.
    """
    scaler_device = getattr(scaler, "_device", None)
    for tensor in tensors:
        kind = tensor.device.type
        if scaler_device is None or kind == scaler_device:
            continue
        state = "enabled, so its scale lives on the wrong device"
        if not scaler.is_enabled():
            state = (
                "disabled, so nothing is scaled (PyTorch turns a 'cuda' scaler off by itself, "
                "with only a warning, where there is no CUDA)"
            )
        fix = "On the CPU train in bf16, which needs no scaler." if kind == "cpu" else (
            f"Make the scaler for the tensors' device: torch.amp.GradScaler({kind!r})."
        )
        raise PrecisionError(
            f"this GradScaler was made for {scaler_device!r} but the tensors are on {kind!r}; it is {state}. {fix} "
            "gpucourse.precision.amp_plan(device).grad_scaler() makes the scaler that fits the device "
            "(enabled only for fp16 on a GPU)."
        )


@contextlib.contextmanager
def fp32_math(mode: str = "ieee"):
    """Run float32 matmuls and convolutions in strict fp32 (``"ieee"``) or TF32 (``"tf32"``).

    TF32 is a math mode, not a dtype: tensors stay float32, Ampere-and-newer
    tensor cores read 10 of their 23 mantissa bits. Sets
    ``torch.set_float32_matmul_precision`` (matmuls) and
    ``torch.backends.cudnn.conv.fp32_precision`` (convolutions, TF32 by default
    in PyTorch) and restores both on exit. On a CPU or a GPU before Ampere both
    modes compute the same.
    """
    import torch

    if mode not in {"ieee", "tf32"}:
        raise PrecisionError(f"fp32_math mode must be 'ieee' (strict fp32) or 'tf32', not {mode!r}")
    conv = torch.backends.cudnn.conv
    saved = torch.get_float32_matmul_precision(), conv.fp32_precision
    torch.set_float32_matmul_precision("highest" if mode == "ieee" else "high")
    conv.fp32_precision = mode
    try:
        yield
    finally:
        torch.set_float32_matmul_precision(saved[0])
        conv.fp32_precision = saved[1]


__all__ = [
    "AmpPlan", "PrecisionError", "amp_plan", "as_dtype", "check_scaler", "describe_gpu", "fp32_math", "grad_scaler",
]  # fmt: skip
