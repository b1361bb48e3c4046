"""The torch function mode behind the rehearsal: which memory stands for a GPU's, what an operation
does there, and the synchronizations CUDA would report (``coursetools.rehearsal`` has the model)."""

from __future__ import annotations

import contextlib
import sys
import types
import warnings
import weakref
from dataclasses import dataclass, field
from pathlib import Path

import torch
from torch.overrides import TorchFunctionMode

_HERE = str(Path(__file__).parent)  # frames of the rehearsal itself
SYNC_MESSAGE = "called a synchronizing CUDA operation"  # c10::cuda::warn_or_error_on_sync
_T = torch._C.TensorBase
_TO = _T.to
_GETTERS = {name: _T.__dict__[name] for name in ("device", "is_cuda", "grad")}
# What each operation does on CUDA, by name (torch.Tensor's methods and torch's functions).
_READS = {"item", "tolist", "__bool__", "__float__", "__int__", "__index__", "__format__"}
_READS |= {"__repr__"}
_SIZE_ON_DEVICE = {"nonzero", "argwhere", "masked_select", "unique", "unique_consecutive"}
_SIZE_ON_DEVICE |= {"equal", "allclose", "is_nonzero"}
_INDEXING = {"__getitem__", "__setitem__", "index_put_", "index_put"}
_FROM_DATA = {"tensor", "as_tensor", "new_tensor"}
_TRANSFERS = {"to", "cuda", "cpu"}
_HOST_ONLY = {"numpy", "__array__"}
_CROSSING = _INDEXING | _TRANSFERS | _HOST_ONLY | {"copy_", "pin_memory", "is_pinned"}
_NAMED = _READS | _SIZE_ON_DEVICE | _CROSSING | _FROM_DATA | {"where"}
_ORIGINALS = {
    **{getattr(torch.Tensor, n): n for n in _NAMED if hasattr(torch.Tensor, n)},
    **{getattr(torch, n): n for n in _NAMED if hasattr(torch, n)},
}


def _name(func) -> str:
    """The operation's name: the original's, or that of the torch.Tensor method or torch function
    a notebook replaced by a spy (PyTorch hands the mode whatever the attribute holds now)."""
    with contextlib.suppress(TypeError):
        if func in _ORIGINALS:
            return _ORIGINALS[func]
    for name in _NAMED:
        if getattr(torch.Tensor, name, None) is func or getattr(torch, name, None) is func:
            return name
    return getattr(func, "__name__", "")


def _is_cuda(device) -> bool:
    if isinstance(device, torch.device):
        return device.type == "cuda"
    return isinstance(device, str) and device.split(":")[0] == "cuda"


def index_of(device) -> int:
    device = torch.device(device)
    return device.index or 0


class Places:
    """Which host storages stand for device memory (or pinned memory). A storage's Python object
    lives as long as its memory (PyTorch preserves it), so a weak reference to it marks the memory
    for as long as any tensor or view uses it, and forgets it once freed."""

    def __init__(self):
        self._held: dict[int, tuple[int, weakref.ref]] = {}

    @staticmethod
    def _storage(tensor):
        try:
            return tensor.untyped_storage()
        except (RuntimeError, NotImplementedError, TypeError):  # sparse and the like
            return None

    def add(self, tensor, index: int = 0) -> None:
        storage = self._storage(tensor)
        if storage is not None:
            key = id(storage)
            self._held[key] = (index, weakref.ref(storage, lambda _, k=key: self._held.pop(k, 0)))

    def index(self, tensor) -> int | None:
        """The device index this tensor's memory stands for, else None (host memory)."""
        if not isinstance(tensor, torch.Tensor):
            return None
        storage = self._storage(tensor)
        held = self._held.get(id(storage)) if storage is not None else None
        return held[0] if held is not None and held[1]() is storage else None


@dataclass
class Syncs:
    """What the simulated CUDA made wait: each reported synchronization as (what, file, line)."""

    reported: list = field(default_factory=list)
    explicit: int = 0  # torch.cuda.synchronize() and events: a wait CUDA does not report
    staged: int = 0  # non-blocking copies with pageable host memory: waits nothing reports

    def __len__(self) -> int:
        return len(self.reported)


class Mode(TorchFunctionMode):
    """Placement and synchronizations, as CUDA would have them (see the module's doc)."""

    def __init__(self, rehearsal):
        super().__init__()
        self.r = rehearsal

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        r = self.r
        if getattr(func, "__name__", "") in ("__get__", "__set__"):
            return self._attribute(func, args)
        name = _name(func)
        if name in _TRANSFERS:
            return self._transfer(name, args, kwargs)
        if name == "copy_":
            there, here = r.places.index(args[0]), r.places.index(args[1])
            if (there is None) != (here is None):
                non_blocking = kwargs.get("non_blocking", args[2] if len(args) > 2 else False)
                self._cross(not non_blocking)
                host = args[0] if there is None else args[1]
                r.syncs.staged += non_blocking and r.pinned.index(host) is None
            return func(*args, **kwargs)
        if name in _HOST_ONLY and r.places.index(args[0]) is not None:
            raise TypeError(
                f"can't convert cuda:{r.places.index(args[0])} device type tensor to numpy. "
                "Use Tensor.cpu() to copy the tensor to host memory first."
            )
        if name == "pin_memory":
            pinned = _TO(args[0], "cpu", copy=True)
            r.pinned.add(pinned)
            return pinned
        if name == "is_pinned":
            return r.pinned.index(args[0]) is not None or func(*args, **kwargs)
        target = kwargs.get("device")
        if _is_cuda(target):
            index = self._check(target)
            kwargs = {**kwargs, "device": "cpu"}
            if name in _FROM_DATA and r.places.index(args[0] if args else None) is None:
                self._cross(True)  # tensor_new.cpp: made on the host, then a blocking copy
            out = func(*args, **kwargs)
            self._mark(out, index)
            return out
        device_inputs = self._places_of(args, kwargs)
        if not device_inputs:
            return func(*args, **kwargs)
        host = device_inputs.pop(None, None)
        if host and name not in _CROSSING and not name.startswith("_"):  # torch's plumbing
            raise RuntimeError(
                "Expected all tensors to be on the same device, but found at least two devices, "
                f"cuda:{min(device_inputs)} and cpu! (the CUDA rehearsal: {name})"
            )
        masked = name in _INDEXING and self._masked(args)
        if (
            name in _READS
            or name in _SIZE_ON_DEVICE
            or masked
            or (name == "where" and len(args) == 1)
        ):
            self._cross(True)
        out = func(*args, **kwargs)
        if name not in _READS:
            self._mark(out, min(device_inputs))
        return out

    def _attribute(self, func, args):
        r, owner = self.r, func.__self__
        if owner is _GETTERS["device"]:
            index = r.places.index(args[0])
            return func(*args) if index is None else torch.device("cuda", index)
        if owner is _GETTERS["is_cuda"]:
            return r.places.index(args[0]) is not None or func(*args)
        out = func(*args)
        index = r.places.index(args[0])
        if owner is _GETTERS["grad"] and index is not None and isinstance(out, torch.Tensor):
            r.places.add(out, index)  # autograd made it in C++, where the mode does not look
        return out

    def _transfer(self, name, args, kwargs):
        r, tensor = self.r, args[0]
        here = r.places.index(tensor)
        rest, kwargs = list(args[1:]), dict(kwargs)
        if name == "cpu":
            target = "cpu"
        elif name == "cuda":
            target = rest.pop(0) if rest else kwargs.pop("device", None)
            target = torch.device("cuda", target or 0) if target in (None, *range(8)) else target
        else:
            target = kwargs.pop("device", None)
            if target is None and rest and not isinstance(rest[0], torch.dtype):
                target = rest.pop(0)
            if isinstance(target, torch.Tensor):
                kwargs.setdefault("dtype", target.dtype)
                index = r.places.index(target)
                target = "cpu" if index is None else torch.device("cuda", index)
            if isinstance(target, int):
                target = torch.device("cuda", target)
        non_blocking = kwargs.pop("non_blocking", False)
        if rest and isinstance(rest[-1], bool):
            non_blocking = rest.pop()
        if target is None:  # a cast only
            out = _TO(tensor, *rest, non_blocking=non_blocking, **kwargs)
            self._mark(out, here)
            return out
        if torch.device(target).type not in ("cpu", "cuda"):  # meta: PyTorch's own business
            return _TO(tensor, target, *rest, non_blocking=non_blocking, **kwargs)
        there = self._check(target) if _is_cuda(target) else None
        crossing = (here is None) != (there is None) or (
            here is not None and there is not None and here != there
        )
        if crossing:
            self._cross(not non_blocking)
            kwargs["copy"] = True  # a new tensor, as CUDA makes: the source keeps its place
            r.syncs.staged += non_blocking and here is None and r.pinned.index(tensor) is None
        out = _TO(tensor, "cpu", *rest, non_blocking=non_blocking, **kwargs)
        self._mark(out, there)
        if crossing and non_blocking and there is None:
            r.pinned.add(out)  # _to_copy pins a non-blocking copy's host memory (pin_out)
        return out

    def _check(self, device) -> int:
        index = index_of(device)
        if index >= self.r.gpus:
            raise RuntimeError("CUDA error: invalid device ordinal (the CUDA rehearsal)")
        return index

    def _places_of(self, args, kwargs) -> dict:
        """{device index, or None for a host tensor of 1 or more dims: True} among the arguments."""
        found = {}
        for value in (*args, *kwargs.values()):
            for item in value if isinstance(value, list | tuple) else (value,):
                if isinstance(item, torch.Tensor):
                    index = self.r.places.index(item)
                    if index is not None or item.dim() > 0:
                        found[index] = True
        return found if any(key is not None for key in found) else {}

    @staticmethod
    def _masked(args) -> bool:
        index = args[1] if len(args) > 1 else None
        parts = index if isinstance(index, tuple | list) else (index,)
        return any(isinstance(p, torch.Tensor) and p.dtype == torch.bool for p in parts)

    def _mark(self, out, index) -> None:
        if index is None:
            return
        for item in out if isinstance(out, list | tuple) else (out,):
            if isinstance(item, torch.Tensor):
                self.r.places.add(item, index)

    def _cross(self, blocking: bool) -> None:
        """A synchronization if ``blocking``: recorded, and reported as CUDA reports it, from the
        first frame outside the rehearsal (this class's frames pass for the warnings module's)."""
        if not blocking:
            return
        r, caller, level = self.r, sys._getframe(1), 2  # warn's stacklevel 2 names our caller
        while caller is not None and (
            caller.f_code.co_filename.startswith(_HERE)
            or caller.f_globals.get("__name__") in ("torch.overrides", "warnings", "_py_warnings")
        ):
            caller, level = caller.f_back, level + 1
        r.syncs.reported.append((caller.f_code.co_filename, caller.f_lineno) if caller else None)
        profiled("cudaStreamSynchronize")
        if r._debug_mode == 2:
            raise RuntimeError(SYNC_MESSAGE)
        if r._debug_mode == 1:
            warnings.warn(SYNC_MESSAGE, UserWarning, stacklevel=level)


def profiled(runtime_call: str) -> None:
    """What CUPTI would show the profiler: the CUDA runtime call, as an event of that name."""
    if torch.autograd._profiler_enabled():
        with torch.autograd.profiler.record_function(runtime_call):
            pass


def disguised(cls: type, module_name: str) -> type:
    """``cls`` with every method's frames naming ``module_name``: on CUDA no Python frame sits
    between a line and the warning it causes, so frame walkers skip only the warnings module's."""
    namespace = {}
    for name, value in vars(cls).items():
        if isinstance(value, types.FunctionType):
            globs = {**value.__globals__, "__name__": module_name}
            value = types.FunctionType(
                value.__code__, globs, value.__name__, value.__defaults__, value.__closure__
            )
        elif isinstance(value, staticmethod):
            inner = value.__func__
            globs = {**inner.__globals__, "__name__": module_name}
            value = staticmethod(
                types.FunctionType(inner.__code__, globs, inner.__name__, inner.__defaults__)
            )
        if name not in ("__dict__", "__weakref__"):
            namespace[name] = value
    return type(cls.__name__, (cls,), namespace)  # a subclass: super() in its methods still works


def pin_tree(data, pinned: Places):
    if isinstance(data, torch.Tensor):
        out = _TO(data, "cpu", copy=True)
        pinned.add(out)
        return out
    if isinstance(data, dict):
        return type(data)({k: pin_tree(v, pinned) for k, v in data.items()})
    if isinstance(data, list | tuple) and not hasattr(data, "_fields"):
        return type(data)(pin_tree(v, pinned) for v in data)
    if hasattr(data, "_fields"):
        return type(data)(*(pin_tree(v, pinned) for v in data))
    return data
