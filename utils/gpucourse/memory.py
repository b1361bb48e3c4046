"""What a training step keeps in memory (lessons 04 and 07): ``SavedTensorMeter`` counts what
autograd saves for backward, ``peak_memory`` measures a step's peak."""

from __future__ import annotations

import weakref
from collections.abc import Callable, Iterable

import torch
from torch import nn


class SavedTensorMeter(torch.autograd.graph.saved_tensors_hooks):
    """Bytes autograd keeps for ``backward()``, ``live`` now and at ``peak``, each storage once (not
    parameters or ``exclude``).

    A tensor leaves ``live`` when autograd lets it go: after ``backward()``, or when its graph is
    unreferenced.
    """

    def __init__(self, exclude: Iterable[torch.Tensor] = ()):
        # one key per storage, also on meta
        self._exclude = {t.untyped_storage()._cdata for t in exclude}
        self._holders: dict = {}
        self._sizes: dict = {}
        self.live = self.peak = 0
        super().__init__(
            self._pack, lambda packed: packed.tensor if isinstance(packed, _Packed) else packed
        )

    def _pack(self, t: torch.Tensor):
        base = t._base if t._base is not None else t
        key = t.untyped_storage()._cdata
        if (base.is_leaf and base.requires_grad) or key in self._exclude:
            return t
        # detached: an output saved with its grad_fn would make a cycle
        packed = _Packed(t.detach())
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


def peak_memory(
    fn: Callable[[], object], device, *, model: nn.Module | None = None, exclude=()
) -> int:
    """Peak bytes of ``fn()`` above what was alive just before it; elsewhere than CUDA, the peak
    saved for backward.

    On CUDA ``model``'s gradients are dropped first (as a training step does), so every step starts
    from the same baseline.
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
