"""What a training step keeps in memory, and how large a batch fits (lessons 04 and 07; 07 calls the allocator itself).

``SavedTensorMeter`` counts what autograd saves for backward, ``peak_memory`` a step's peak, ``estimate_memory`` a
step's memory from a forward pass on ``meta``, ``find_batch_size`` grows then bisects, ``SimulatedGPU`` is a pretend card.
"""

from __future__ import annotations

import gc
import weakref
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import torch
from torch import nn

MiB, GiB = 2**20, 2**30
OPTIMIZER_STATES = {"sgd": 0, "sgd_momentum": 1, "adam": 2, "adamw": 2}  # fp32 values kept per parameter


def fmt_bytes(n: float) -> str:
    """``1536`` -> ``'1.50 KiB'``."""
    for unit, scale in (("GiB", GiB), ("MiB", MiB), ("KiB", 2**10)):
        if abs(n) >= scale:
            return f"{n / scale:.2f} {unit}"
    return f"{int(n)} B"


class SavedTensorMeter(torch.autograd.graph.saved_tensors_hooks):
    """Bytes autograd keeps for ``backward()``, ``live`` now and at ``peak``, each storage once (not parameters or ``exclude``).

    A tensor leaves ``live`` when autograd lets it go: after ``backward()``, or when its graph is unreferenced.
    """

    def __init__(self, exclude: Iterable[torch.Tensor] = ()):
        self._exclude = {t.untyped_storage()._cdata for t in exclude}  # one key per storage, also on meta
        self._holders: dict = {}
        self._sizes: dict = {}
        self.live = self.peak = 0
        super().__init__(self._pack, lambda packed: packed.tensor if isinstance(packed, _Packed) else packed)

    def _pack(self, t: torch.Tensor):
        base = t._base if t._base is not None else t
        key = t.untyped_storage()._cdata
        if (base.is_leaf and base.requires_grad) or key in self._exclude:
            return t
        packed = _Packed(t.detach())  # detached: an output saved with its grad_fn would make a cycle
        if self._holders.get(key, 0) == 0:
            self._sizes[key] = t.untyped_storage().nbytes()
            self.live += self._sizes[key]
            self.peak = max(self.peak, self.live)
        self._holders[key] = self._holders.get(key, 0) + 1
        weakref.finalize(packed, self._release, key)
        return packed

    def _release(self, key) -> None:
        self._holders[key] -= 1
        if self._holders[key] == 0:
            self.live -= self._sizes.pop(key)
            del self._holders[key]

    def __enter__(self) -> SavedTensorMeter:
        super().__enter__()
        return self


class _Packed:  # a holder autograd keeps; when it is freed, so is the saved tensor
    __slots__ = ("tensor", "__weakref__")

    def __init__(self, tensor: torch.Tensor):
        self.tensor = tensor


def peak_memory(fn: Callable[[], object], device, *, model: nn.Module | None = None, exclude=()) -> int:
    """Peak bytes of ``fn()`` above what was alive just before it; elsewhere than CUDA, the peak saved for backward.

    On CUDA ``model``'s gradients are dropped first (as a training step does), so every step starts from the same baseline.
    """
    device = torch.device(device)
    if device.type != "cuda":
        with SavedTensorMeter(exclude=exclude) as meter:
            fn()
        return meter.peak
    if model is not None:
        model.zero_grad(set_to_none=True)
    torch.cuda.synchronize(device)
    torch.cuda.reset_peak_memory_stats(device)
    baseline = torch.cuda.memory_allocated(device)
    fn()
    torch.cuda.synchronize(device)
    return torch.cuda.max_memory_allocated(device) - baseline


@dataclass(frozen=True)
class MemoryEstimate:
    """Bytes of one training step, by kind (activations: what autograd saves for backward)."""

    weights: int
    gradients: int
    optimizer: int
    activations: int
    batch: int

    @property
    def fixed(self) -> int:
        return self.weights + self.gradients + self.optimizer

    @property
    def total(self) -> int:
        return self.fixed + self.activations + self.batch

    def __str__(self) -> str:
        rows = [("weights", self.weights), ("gradients", self.gradients), ("optimizer state", self.optimizer),
                ("activations", self.activations), ("input batch", self.batch), ("total", self.total)]
        return "\n".join(f"{name:<16} {fmt_bytes(n):>11}" for name, n in rows)


def estimate_memory(model: nn.Module, example, optimizer: str = "adam") -> MemoryEstimate:
    """One fp32 step of ``model`` on a batch like ``example`` (tensor or shape), run on ``meta`` twins: no memory used.

    Not counted: the CUDA context, cached blocks, temporaries.
    """
    if optimizer not in OPTIMIZER_STATES:
        raise ValueError(f"unknown optimizer {optimizer!r}: give one of {', '.join(OPTIMIZER_STATES)}")
    if not isinstance(example, torch.Tensor | tuple | list):
        raise ValueError(f"give the batch as a tensor or a shape tuple such as (64, 3, 32, 32), not {example!r}")
    shape, dtype = (example.shape, example.dtype) if torch.is_tensor(example) else (tuple(example), torch.float32)
    x = torch.empty(shape, dtype=dtype, device="meta")
    trainable = sum(p.nbytes for p in model.parameters() if p.requires_grad)
    weights = sum(t.nbytes for t in [*model.parameters(), *model.buffers()])
    stores = [(store, name, value) for m in model.modules() for store in (m._parameters, m._buffers)
              for name, value in store.items() if value is not None]
    try:
        for store, name, value in stores:
            twin = torch.empty_like(value, device="meta")
            store[name] = nn.Parameter(twin, value.requires_grad) if isinstance(value, nn.Parameter) else twin
        with SavedTensorMeter(exclude=[x]) as meter:
            model(x)
    finally:
        for store, name, value in stores:
            store[name] = value
    return MemoryEstimate(weights, trainable, OPTIMIZER_STATES[optimizer] * trainable, meter.peak, x.nbytes)


@dataclass
class SimulatedGPU:
    """A pretend card: ``step(n)`` raises ``torch.OutOfMemoryError`` when ``fixed + per_sample * n > total``."""

    total: int
    fixed: int
    per_sample: int

    def step(self, batch_size: int) -> int:
        need = self.fixed + self.per_sample * batch_size
        if need > self.total:
            raise torch.OutOfMemoryError(f"(simulated) CUDA out of memory at batch {batch_size}: it needs "
                                         f"{fmt_bytes(need)}, the card has {fmt_bytes(self.total)}.")
        return need


@dataclass(frozen=True)
class BatchSizeResult:
    largest: int  # the largest batch size that ran
    recommended: int  # largest * safety, rounded down (at least 1)
    first_failing: int | None  # the smallest size that ran out of memory (None: none up to the limit)
    tried: list  # (batch size, fitted) in the order tried


def find_batch_size(try_batch: Callable[[int], object], *, start=1, limit=2**16, safety=0.9) -> BatchSizeResult:
    """The largest batch size for which ``try_batch(batch_size)`` runs without ``torch.OutOfMemoryError``.

    Doubles from ``start`` (halves first if it fails) up to ``limit``, then bisects; any other error propagates.
    """
    if not (isinstance(start, int) and isinstance(limit, int)) or not 1 <= start <= limit:
        raise ValueError(f"need whole numbers 1 <= start <= limit, got start={start!r}, limit={limit!r}")
    tried = []

    def fits(size: int) -> bool:
        ok = True
        try:
            try_batch(size)
        except torch.OutOfMemoryError:
            ok = False
        gc.collect()  # out of the except block: the traceback, and the tensors its frames held, are gone
        torch.cuda.empty_cache()  # a no-op where CUDA was never initialized
        tried.append((size, ok))
        return ok

    good, bad = (start, None) if fits(start) else (0, start)
    while bad is None and good < limit:  # fits: double
        size = min(2 * good, limit)
        good, bad = (size, None) if fits(size) else (good, size)
    while bad is not None and bad - good > 1:  # bisect (from 0 when start was too big: that halves it)
        middle = (good + bad) // 2
        good, bad = (middle, bad) if fits(middle) else (good, middle)
    if good == 0:
        raise RuntimeError("even a batch of 1 runs out of memory: weights, gradients and optimizer state do not "
                           "fit. Use an optimizer with less state, shard the model over GPUs (FSDP), or a larger GPU.")
    return BatchSizeResult(largest=good, recommended=max(1, int(good * safety)), first_failing=bad, tried=tried)
