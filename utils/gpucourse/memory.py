"""Where GPU memory goes, how to measure it, and how large a batch fits.

Training memory has a fixed part (weights, gradients, optimizer state) and a
part that grows with the batch (the activations autograd saves for the
backward pass). This module

- estimates both for a model and a batch without using any memory: the
  forward pass runs on the ``meta`` device, and a saved-tensor hook adds up
  what autograd keeps for backward (``estimate_memory``);
- measures what autograd keeps alive on any device, the CPU included
  (``SavedTensorMeter``), and the allocator's numbers on a CUDA GPU
  (``cuda_reading``, ``peak_memory``);
- caps a process's GPU memory so an out-of-memory error is reproducible on
  any card (``cap_memory``), and simulates one where there is no GPU
  (``SimulatedGPU``);
- finds the largest batch that fits: grow until ``torch.OutOfMemoryError``,
  then bisect, with a safety margin, freeing memory between tries
  (``find_batch_size``). It only needs a ``try_batch(batch_size)`` callable,
  so its logic is tested on a CPU with a simulated OOM.
"""

from __future__ import annotations

import contextlib
import gc
import weakref
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

import torch
from torch import nn

MiB = 2**20
GiB = 2**30

# Extra fp32 values an optimizer keeps per trainable parameter.
OPTIMIZER_STATES = {"sgd": 0, "sgd_momentum": 1, "rmsprop": 1, "adagrad": 1, "adam": 2, "adamw": 2}


class DoesNotFitError(RuntimeError):
    """Even the smallest batch runs out of memory."""


class MemoryCapError(ValueError):
    """A memory cap this machine cannot give."""


def fmt_bytes(n: float | None) -> str:
    """``1536`` -> ``'1.50 KiB'``; None -> ``'n/a'``."""
    if n is None:
        return "n/a"
    for unit, scale in (("GiB", GiB), ("MiB", MiB), ("KiB", 2**10)):
        if abs(n) >= scale:
            return f"{n / scale:.2f} {unit}"
    return f"{int(n)} B"


def tensor_bytes(tensors: Iterable[torch.Tensor | None]) -> int:
    """Bytes held by ``tensors`` (None entries, e.g. absent gradients, count 0)."""
    return sum(t.numel() * t.element_size() for t in tensors if t is not None)


def optimizer_state_bytes(optimizer: torch.optim.Optimizer) -> int:
    """Bytes of every tensor in the optimizer's state (Adam creates its moments at the first step)."""
    return tensor_bytes(v for state in optimizer.state.values() for v in state.values() if torch.is_tensor(v))


def optimizer_state_count(optimizer) -> int:
    """How many values per parameter an optimizer keeps: a name ("adam"), a class or an instance."""
    if isinstance(optimizer, torch.optim.Optimizer):
        name = type(optimizer).__name__.lower()
        if name == "sgd" and any(g.get("momentum", 0) for g in optimizer.param_groups):
            name = "sgd_momentum"
    elif isinstance(optimizer, type):
        name = optimizer.__name__.lower()
    else:
        name = str(optimizer).lower().replace("-", "_").replace(" ", "_")
    if name not in OPTIMIZER_STATES:
        known = ", ".join(sorted(OPTIMIZER_STATES))
        raise ValueError(f"unknown optimizer {optimizer!r}: give one of {known}, a torch.optim class or an optimizer")
    return OPTIMIZER_STATES[name]


# --------------------------------------------------------------- saved tensors
def _storage_key(t: torch.Tensor):
    try:
        return t.untyped_storage()._cdata  # one key per storage, also on the meta device
    except Exception:  # a tensor without ordinary storage (sparse, subclasses)
        return ("id", id(t))


def _storage_bytes(t: torch.Tensor) -> int:
    try:
        return t.untyped_storage().nbytes()
    except Exception:
        return t.numel() * t.element_size()


class _Packed:
    __slots__ = ("tensor", "__weakref__")

    def __init__(self, tensor: torch.Tensor):
        self.tensor = tensor


class SavedTensorMeter:
    """Bytes autograd keeps for the backward pass: live now, and the peak.

    Inside ``with SavedTensorMeter() as meter:`` every tensor autograd saves
    is counted (once per storage) until autograd lets it go: after
    ``backward()``, or when the graph is no longer referenced. Parameters
    (leaves that require grad) and the tensors in ``exclude`` are not
    counted. Works on every device, so a CPU shows the activation memory a
    GPU would hold, and a graph kept alive by mistake stays in ``live``.
    """

    def __init__(self, exclude: Iterable[torch.Tensor] = ()):
        self._exclude = {_storage_key(t) for t in exclude}
        self._holders: dict = {}
        self._sizes: dict = {}
        self.live = 0
        self.peak = 0
        self.saved = 0  # number of tensors packed
        self._hooks = torch.autograd.graph.saved_tensors_hooks(self._pack, self._unpack)

    def _pack(self, t: torch.Tensor):
        base = t._base if t._base is not None else t
        if base.is_leaf and base.requires_grad:
            return t  # a parameter (or a view of one): weights, not activations
        key = _storage_key(t)
        if key in self._exclude:
            return t
        packed = _Packed(t.detach())  # detached: an output saved with its grad_fn would make a cycle
        self.saved += 1
        if self._holders.get(key, 0) == 0:
            self._sizes[key] = _storage_bytes(t)
            self.live += self._sizes[key]
            self.peak = max(self.peak, self.live)
        self._holders[key] = self._holders.get(key, 0) + 1
        weakref.finalize(packed, self._release, key)
        return packed

    @staticmethod
    def _unpack(packed):
        return packed.tensor if isinstance(packed, _Packed) else packed

    def _release(self, key) -> None:
        self._holders[key] -= 1
        if self._holders[key] == 0:
            self.live -= self._sizes.pop(key)
            del self._holders[key]

    def reset_peak(self) -> None:
        self.peak = self.live

    def __enter__(self) -> SavedTensorMeter:
        self._hooks.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        self._hooks.__exit__(*exc)

    def __repr__(self) -> str:
        return f"SavedTensorMeter(live={fmt_bytes(self.live)}, peak={fmt_bytes(self.peak)})"


def graph_nodes(tensor) -> int:
    """How many autograd nodes a tensor keeps alive through its ``grad_fn`` (0 for a number or a detached tensor)."""
    root = getattr(tensor, "grad_fn", None)
    seen, todo = set(), [root] if root is not None else []
    while todo:
        node = todo.pop()
        if node is None or id(node) in seen:
            continue
        seen.add(id(node))
        todo.extend(next_fn for next_fn, _ in node.next_functions)
    return len(seen)


# ------------------------------------------------------------------ estimate
@dataclass(frozen=True)
class MemoryEstimate:
    """Bytes one training step needs, by kind (activations: saved for backward)."""

    weights: int
    gradients: int
    optimizer: int
    activations: int
    batch: int
    batch_size: int | None = None

    @property
    def fixed(self) -> int:
        """What does not depend on the batch: weights, gradients, optimizer state."""
        return self.weights + self.gradients + self.optimizer

    @property
    def total(self) -> int:
        return self.fixed + self.activations + self.batch

    def as_dict(self) -> dict[str, int]:
        return {
            "weights": self.weights,
            "gradients": self.gradients,
            "optimizer state": self.optimizer,
            "activations": self.activations,
            "input batch": self.batch,
        }

    def __str__(self) -> str:
        rows = [*self.as_dict().items(), ("total", self.total)]
        return "\n".join(f"{name:<16} {fmt_bytes(n):>11}" for name, n in rows)


def _batch_size_of(example) -> int | None:
    if torch.is_tensor(example):
        return example.shape[0] if example.dim() else None
    if isinstance(example, tuple | list) and example and isinstance(example[0], int):
        return example[0]
    return None


def _to_meta(example, dtype):
    if torch.is_tensor(example):
        return torch.empty(example.shape, dtype=example.dtype, device="meta")
    if isinstance(example, tuple | list) and all(isinstance(n, int) for n in example):
        return torch.empty(tuple(example), dtype=dtype, device="meta")
    kind = type(example).__name__
    raise TypeError(f"give the batch as a tensor or a shape tuple such as (64, 3, 32, 32), not {kind}")


@contextlib.contextmanager
def _on_meta(model: nn.Module):
    """Swap every parameter and buffer for a meta twin (no memory), and put them back after."""
    swapped = []
    try:
        for module in model.modules():
            for store in (module._parameters, module._buffers):
                for name, value in store.items():
                    if value is None:
                        continue
                    twin = torch.empty_like(value, device="meta")
                    if isinstance(value, nn.Parameter):
                        twin = nn.Parameter(twin, requires_grad=value.requires_grad)
                    swapped.append((store, name, value))
                    store[name] = twin
        yield model
    finally:
        for store, name, value in reversed(swapped):
            store[name] = value


def estimate_memory(model: nn.Module, example, optimizer="adam", *, dtype=torch.float32) -> MemoryEstimate:
    """Estimate one training step's memory for ``model`` on a batch like ``example``.

    ``example`` is a tensor (any device: only its shape and dtype are read)
    or a shape tuple. The forward pass runs on the ``meta`` device (the
    model's parameters are swapped for meta twins and put back after), so
    nothing is allocated and any batch size can be asked about; a ``SavedTensorMeter`` adds up what autograd
    keeps for backward. Not counted: the CUDA context, the allocator's
    cached blocks, library workspaces and short-lived temporaries, so a
    measured peak is somewhat higher.
    """
    if not isinstance(model, nn.Module):
        raise TypeError(f"estimate_memory needs an nn.Module, not {type(model).__name__}")
    states = optimizer_state_count(optimizer)
    params = dict(model.named_parameters())
    buffers = dict(model.named_buffers())
    trainable = [p for p in params.values() if p.requires_grad]
    weights = tensor_bytes(params.values()) + tensor_bytes(buffers.values())
    gradients = tensor_bytes(trainable)
    x = _to_meta(example, dtype)
    with _on_meta(model), SavedTensorMeter(exclude=[x]) as meter:
        out = model(x)
    del out
    return MemoryEstimate(
        weights=weights,
        gradients=gradients,
        optimizer=states * gradients,
        activations=meter.peak,
        batch=x.numel() * x.element_size(),
        batch_size=_batch_size_of(example),
    )


# ------------------------------------------------------------------- measure
@dataclass(frozen=True)
class CudaReading:
    """The caching allocator's numbers for one GPU, in bytes."""

    allocated: int  # held by live tensors
    reserved: int  # taken from the GPU by the allocator (allocated + cached)
    peak: int  # max allocated since the last reset_peak_memory_stats

    def __str__(self) -> str:
        allocated, reserved, peak = (fmt_bytes(n) for n in (self.allocated, self.reserved, self.peak))
        return f"allocated {allocated}, reserved {reserved}, peak {peak}"


def cuda_reading(device=None) -> CudaReading | None:
    """The allocator's current numbers on a CUDA ``device``; None on any other device."""
    device = torch.device(device) if device is not None else None
    if device is None or device.type != "cuda" or not torch.cuda.is_available():
        return None
    torch.cuda.synchronize(device)
    return CudaReading(
        allocated=torch.cuda.memory_allocated(device),
        reserved=torch.cuda.memory_reserved(device),
        peak=torch.cuda.max_memory_allocated(device),
    )


def free_memory(device=None) -> None:
    """On CUDA: collect garbage and return the allocator's cached blocks to the GPU.

    Elsewhere there is no cache to return (and reference counting has already
    freed what nothing refers to), so it does nothing.

    ``empty_cache`` frees only blocks no tensor uses: delete your references
    first (and leave any ``except`` block, whose traceback keeps frames alive).
    """
    if torch.cuda.is_available() and (device is None or torch.device(device).type == "cuda"):
        gc.collect()
        torch.cuda.empty_cache()


@dataclass(frozen=True)
class PeakMemory:
    """The peak memory of one call, and what was measured."""

    bytes: int
    what: str

    def __str__(self) -> str:
        return f"{fmt_bytes(self.bytes)} ({self.what})"


def peak_memory(fn: Callable[[], object], device, *, exclude: Iterable[torch.Tensor] = ()) -> PeakMemory:
    """Peak memory of ``fn()`` above what was allocated before it.

    On CUDA: ``max_memory_allocated`` after ``reset_peak_memory_stats``,
    minus the allocation before the call. Elsewhere: the peak of what
    autograd saved for backward (``SavedTensorMeter``), the part of a
    training step that the fixes of this lesson change; tensors in
    ``exclude`` (the input batch, say) are not counted there.
    """
    device = torch.device(device)
    if device.type == "cuda":
        free_memory(device)
        torch.cuda.synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)
        before = torch.cuda.memory_allocated(device)
        fn()
        torch.cuda.synchronize(device)
        return PeakMemory(torch.cuda.max_memory_allocated(device) - before, "CUDA peak allocated above baseline")
    with SavedTensorMeter(exclude=exclude) as meter:
        fn()
    return PeakMemory(meter.peak, "peak saved for backward, measured by autograd hooks")


def memory_timeline(snapshot: dict, device: int = 0) -> tuple[list[int], list[int]]:
    """(event index, bytes allocated) from ``torch.cuda.memory._snapshot()``'s trace.

    Bytes are relative to when history recording began: ``alloc`` adds a
    block, ``free_completed`` removes it.
    """
    traces = snapshot.get("device_traces") or []
    if device >= len(traces):
        return [], []
    steps, level, total = [], [], 0
    for i, event in enumerate(traces[device]):
        if event.get("action") == "alloc":
            total += event["size"]
        elif event.get("action") == "free_completed":
            total -= event["size"]
        else:
            continue
        steps.append(i)
        level.append(total)
    return steps, level


# ------------------------------------------------------------------------ cap
def check_cap(cap_bytes: float, total_bytes: float) -> float:
    """The fraction of the card that ``cap_bytes`` is; a clear error if it cannot be given."""
    if cap_bytes <= 0:
        raise MemoryCapError(f"a memory cap must be positive, got {fmt_bytes(cap_bytes)}")
    if cap_bytes > total_bytes:
        raise MemoryCapError(
            f"a cap of {fmt_bytes(cap_bytes)} is larger than the card ({fmt_bytes(total_bytes)} in all): "
            "a cap can only lower the limit. Ask for less, or leave the card uncapped."
        )
    return cap_bytes / total_bytes


def cap_memory(cap_bytes: float | None, device) -> float:
    """Limit this process's PyTorch allocations on a CUDA ``device`` to ``cap_bytes``.

    Uses ``torch.cuda.set_per_process_memory_fraction`` with the fraction of
    the card that ``cap_bytes`` is, so the same number of bytes is the limit
    on a T4 and on an H100. ``None`` lifts the cap. Returns the fraction.
    """
    device = torch.device(device)
    if device.type != "cuda" or not torch.cuda.is_available():
        raise MemoryCapError(
            f"cannot cap GPU memory on {device}: there is no CUDA GPU. "
            "On a CPU, use gpucourse.memory.SimulatedGPU to rehearse an out-of-memory error."
        )
    total = torch.cuda.get_device_properties(device).total_memory
    fraction = 1.0 if cap_bytes is None else check_cap(cap_bytes, total)
    torch.cuda.set_per_process_memory_fraction(fraction, device)
    return fraction


@dataclass
class SimulatedGPU:
    """A pretend card for CPU runs: a step raises ``torch.OutOfMemoryError`` when it would not fit.

    ``step(batch_size)`` needs ``fixed + per_sample * batch_size`` bytes
    of the card's ``total``; above that it raises the same exception type
    as a real GPU, with a message that says it is simulated.
    """

    total: int
    fixed: int
    per_sample: int
    calls: list = field(default_factory=list)

    def need(self, batch_size: int) -> int:
        return self.fixed + self.per_sample * batch_size

    def step(self, batch_size: int) -> int:
        self.calls.append(batch_size)
        need = self.need(batch_size)
        if need > self.total:
            raise torch.OutOfMemoryError(
                f"(simulated) CUDA out of memory. Tried to allocate {fmt_bytes(need - self.fixed)} for batch "
                f"{batch_size}; the card has {fmt_bytes(self.total)} and {fmt_bytes(self.fixed)} are already in use."
            )
        return need


# --------------------------------------------------------------------- finder
@dataclass(frozen=True)
class BatchSizeResult:
    """What ``find_batch_size`` found."""

    largest: int  # the largest batch size that ran
    recommended: int  # largest * safety, rounded down (at least 1)
    first_failing: int | None  # the smallest size that ran out of memory (None: reached the limit)
    tried: list[tuple[int, bool]]  # (batch size, fitted) in the order tried

    def __str__(self) -> str:
        failing = "none up to the limit" if self.first_failing is None else str(self.first_failing)
        return (
            f"largest batch that fits: {self.largest}; first that ran out of memory: {failing}; "
            f"recommended with the safety margin: {self.recommended} ({len(self.tried)} tries)"
        )


def _fits(try_batch: Callable[[int], object], batch_size: int, device) -> bool:
    ok = True
    try:
        try_batch(batch_size)
    except torch.OutOfMemoryError:
        ok = False
    # Outside the except block: the traceback (and the tensors its frames hold) is gone.
    free_memory(device)
    return ok


def find_batch_size(
    try_batch: Callable[[int], object],
    *,
    start: int = 1,
    limit: int = 2**16,
    safety: float = 0.9,
    device=None,
) -> BatchSizeResult:
    """The largest batch size for which ``try_batch(batch_size)`` runs without OOM.

    Doubles from ``start`` until a try raises ``torch.OutOfMemoryError`` or
    ``limit`` is reached, then bisects between the last size that fitted and
    the first that did not. If ``start`` already fails, it halves down to 1
    first. Memory is freed after every try. ``recommended`` leaves a safety
    margin (``safety`` times the largest), because memory use varies between
    steps (other inputs, fragmentation). Only out-of-memory errors are
    caught: any other error is a bug in ``try_batch`` and propagates.
    """
    if not callable(try_batch):
        raise TypeError("try_batch must be a function that runs one step at a given batch size")
    if not (isinstance(start, int) and isinstance(limit, int)) or start < 1 or limit < start:
        raise ValueError(f"need integers 1 <= start <= limit, got start={start!r}, limit={limit!r}")
    if not 0 < safety <= 1:
        raise ValueError(f"safety is the share of the largest batch to use, in (0, 1], got {safety!r}")
    tried: list[tuple[int, bool]] = []

    def attempt(size: int) -> bool:
        ok = _fits(try_batch, size, device)
        tried.append((size, ok))
        return ok

    good, bad = 0, None
    size = start
    if not attempt(size):  # too big from the start: halve until something fits
        bad = size
        while size > 1:
            size = max(1, size // 2)
            if attempt(size):
                good = size
                break
            bad = size
        if good == 0:
            raise DoesNotFitError(
                "even a batch of 1 runs out of memory: the model, its gradients and the optimizer state "
                "(plus one sample's activations) do not fit. Estimate them with gpucourse.memory.estimate_memory, "
                "then shrink the model, use mixed precision, activation checkpointing or an optimizer with less "
                "state (SGD instead of Adam), or use a larger GPU."
            )
    else:
        good = size
        while size < limit:
            size = min(2 * size, limit)
            if not attempt(size):
                bad = size
                break
            good = size
    if bad is not None:
        while bad - good > 1:
            middle = (good + bad) // 2
            if attempt(middle):
                good = middle
            else:
                bad = middle
    return BatchSizeResult(largest=good, recommended=max(1, int(good * safety)), first_failing=bad, tried=tried)
