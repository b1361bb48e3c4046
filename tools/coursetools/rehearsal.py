"""The CUDA path rehearsed on a CPU: what a GPU does that changes a grade or a claim.

A model, not a GPU. Tensors stay in host memory and every kernel runs on the CPU; what the
rehearsal adds is what CUDA would do differently around them:

- **Placement.** ``torch.cuda.is_available()`` is true, ``"cuda"``/``"cuda:N"`` is a device, and a
  tensor made there or copied there reports ``device == cuda:N`` and ``is_cuda``; results of an
  operation on such tensors are on the device too. An operation mixing a device tensor with a host
  one (0-d host tensors aside, as CUDA allows) raises CUDA's "Expected all tensors to be on the
  same device"; ``.numpy()`` of a device tensor raises as on CUDA.
- **Synchronizations.** The operations that make a CUDA stream wait (PyTorch's
  ``c10/cuda/CUDAFunctions.h``: ``memcpy_and_sync`` and ``stream_synchronize``) are reported as
  ``torch.cuda.set_sync_debug_mode("warn")`` reports them: a ``UserWarning`` "called a
  synchronizing CUDA operation", attributed to the Python line that made the call, with no Python
  frame between that line and the warnings machinery but frames a frame walker takes for the
  warnings module. They are: a blocking copy to or from the device (``.to``, ``.cuda()``,
  ``.cpu()``, ``copy_``, ``Module.to``, ``torch.tensor(data, device=...)``), a read of a value
  (``.item()``, ``.tolist()``, ``bool()``, ``float()``, ``int()``, printing), and the operations
  whose output size is on the device (``nonzero``, boolean-mask indexing, ``masked_select``,
  ``unique``, ``torch.equal``). ``torch.cuda.synchronize()`` waits but, as on CUDA
  (``device_synchronize``), is not reported through that channel; it is counted apart.
- **Machines.** A T4 with 2 vCPUs as on Colab, an L4, an A100, an H100 with 16 cores, with 1 to 8
  GPUs (``MACHINES``); ``torch.cuda.get_device_properties`` and the CPU count say so.
- **Gaps** (``GAPS``): no DALI, no TensorFlow, no RAPIDS, no compiler for ``torch.compile``,
  Colab's pandas imported at kernel start, Python 3.14's pure-Python warnings module.

What it cannot model: timings (nothing runs ahead of the host, so a sync costs nothing), kernels
and their numerics (fp16 and bf16 run CPU autocast's op lists), memory statistics, streams,
several GPUs in one process (every device tensor computes in the same host memory), NCCL.

``Rehearsal(machine, gpus=, gaps=)`` is a context manager for a test's process;
``python -m coursetools.rehearsal`` is not a thing: a kernel rehearses from its start when
``GPUCOURSE_REHEARSE`` names a machine (``ipython_dir`` writes the start-up file).
"""

from __future__ import annotations

import contextlib
import os
import sys
import time
import types
import warnings
import weakref
from dataclasses import dataclass, field

import torch
from torch.overrides import TorchFunctionMode

SYNC_MESSAGE = "called a synchronizing CUDA operation"  # c10::cuda::warn_or_error_on_sync
REHEARSE_VAR = "GPUCOURSE_REHEARSE"  # "t4", "h100:8", "t4:1:dali,compiler" (machine:gpus:gaps)


@dataclass(frozen=True)
class Machine:
    name: str
    capability: tuple[int, int]
    memory_gib: float
    processors: int  # streaming multiprocessors
    cpus: int  # the host's logical cores the notebook sees
    colab: bool = False


# Device facts: NVIDIA's data sheets and the CUDA programming guide's compute capabilities; CPU counts
# as the clouds rent them (Colab's T4: 2 vCPUs; GCP g2-standard-8 for the L4; a typical 16-core
# share of an H100 host).
MACHINES = {
    "t4": Machine("Tesla T4", (7, 5), 14.74, 40, 2, colab=True),
    "l4": Machine("NVIDIA L4", (8, 9), 22.03, 58, 8),
    "a100": Machine("NVIDIA A100-SXM4-40GB", (8, 0), 39.39, 108, 12),
    "h100": Machine("NVIDIA H100 80GB HBM3", (9, 0), 79.19, 132, 16),
}
GAPS = ("dali", "tensorflow", "rapids", "compiler", "colab-pandas", "py314-warnings")
_MISSING_MODULES = {
    "dali": ("nvidia.dali", "nvidia.dali.plugin.pytorch", "nvidia.dali.plugin.tf"),
    "tensorflow": ("tensorflow",),
    "rapids": ("cudf", "cudf.pandas", "cuml", "cuml.accel", "cupy"),
}

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


def _index(device) -> int:
    device = torch.device(device)
    return device.index or 0


class _Places:
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

    def __len__(self) -> int:
        return len(self.reported)


class _Mode(TorchFunctionMode):
    """Placement and synchronizations, as CUDA would have them (see the module's doc)."""

    def __init__(self, rehearsal: Rehearsal):
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
                self._cross(not kwargs.get("non_blocking", args[2] if len(args) > 2 else False))
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
        if name in _READS or name in _SIZE_ON_DEVICE or masked or (name == "where" and len(args) == 1):
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
            target = torch.device("cuda", rest.pop(0) if rest else kwargs.pop("device", None) or 0)
            if isinstance(target.index, torch.device):
                target = target.index
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
        there = self._check(target) if _is_cuda(target) else None
        crossing = (here is None) != (there is None) or (
            here is not None and there is not None and here != there
        )
        if crossing:
            self._cross(not non_blocking)
            kwargs["copy"] = True  # a new tensor, as CUDA makes: the source keeps its place
        out = _TO(tensor, "cpu", *rest, non_blocking=non_blocking, **kwargs)
        self._mark(out, there)
        return out

    def _check(self, device) -> int:
        index = _index(device)
        if index >= self.r.gpus:
            raise RuntimeError("CUDA error: invalid device ordinal (the CUDA rehearsal)")
        return index

    def _places_of(self, args, kwargs) -> dict:
        """{device index or None (host, more than 0-d): True} for the tensors among the arguments."""
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
            caller.f_code.co_filename == __file__
            or caller.f_globals.get("__name__") in ("torch.overrides", "warnings", "_py_warnings")
        ):
            caller, level = caller.f_back, level + 1
        r.syncs.reported.append((caller.f_code.co_filename, caller.f_lineno) if caller else None)
        if r._debug_mode == 2:
            raise RuntimeError(SYNC_MESSAGE)
        if r._debug_mode == 1:
            warnings.warn(SYNC_MESSAGE, UserWarning, stacklevel=level)


def _disguised(cls: type, module_name: str) -> type:
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


class _Event:
    """torch.cuda.Event on the host clock (elapsed_time in milliseconds, as CUDA's)."""

    def __init__(self, enable_timing=False, blocking=False, interprocess=False):
        self.at, self._rehearsal = None, _ACTIVE[-1] if _ACTIVE else None

    def record(self, stream=None):
        self.at = time.perf_counter()

    def synchronize(self):
        if self._rehearsal:
            self._rehearsal.syncs.explicit += 1

    def query(self):
        return True

    def wait(self, stream=None):
        pass

    def elapsed_time(self, end) -> float:
        if self.at is None or end.at is None:
            raise RuntimeError("Both events must be recorded before calculating elapsed time.")
        return (end.at - self.at) * 1000.0


class _Stream:
    """The one stream of the rehearsal: nothing runs ahead of the host, so waiting is free."""

    def __init__(self, rehearsal):
        self._rehearsal = rehearsal

    def is_capturing(self) -> bool:
        return False

    def synchronize(self) -> None:  # stream_synchronize: CUDA reports this one
        self._rehearsal.sync()

    def wait_stream(self, stream) -> None:
        pass

    def query(self) -> bool:
        return True


_ACTIVE: list = []


class Rehearsal:
    """``with Rehearsal("t4", gpus=1, gaps=("dali",)) as r:`` the CUDA path on this CPU; ``r.syncs``
    lists the synchronizations it made."""

    def __init__(self, machine: str = "t4", *, gpus: int = 1, gaps=()):
        if machine not in MACHINES:
            raise ValueError(f"machine {machine!r}: one of {', '.join(MACHINES)}")
        unknown = set(gaps) - set(GAPS)
        if unknown:
            raise ValueError(f"gaps {sorted(unknown)}: each one of {', '.join(GAPS)}")
        if not 1 <= gpus <= 8:
            raise ValueError(f"gpus={gpus}: 1 to 8")
        self.machine, self.key, self.gpus, self.gaps = MACHINES[machine], machine, gpus, set(gaps)
        self.places, self.pinned, self.syncs = _Places(), _Places(), Syncs()
        self._debug_mode, self._undo, self._mode = 0, [], None

    def __repr__(self) -> str:
        gaps = f", gaps={sorted(self.gaps)}" if self.gaps else ""
        return f"Rehearsal({self.key!r}, gpus={self.gpus}{gaps})"

    def sync(self) -> None:
        """Report one synchronization, as CUDA does, from the line that called this."""
        self._mode._cross(True)

    def _set_sync_debug_mode(self, mode) -> None:
        names = {"default": 0, "warn": 1, "error": 2}
        self._debug_mode = names[mode] if isinstance(mode, str) else int(mode)

    def _synchronize(self, device=None) -> None:
        self.syncs.explicit += 1

    def _properties(self, device=None):
        index = 0 if device is None else _index(device) if not isinstance(device, int) else device
        if index >= self.gpus:
            raise AssertionError("Invalid device id (the CUDA rehearsal)")
        m = self.machine
        return types.SimpleNamespace(
            name=m.name,
            major=m.capability[0],
            minor=m.capability[1],
            total_memory=int(m.memory_gib * 2**30),
            multi_processor_count=m.processors,
            is_integrated=False,
            uuid=f"GPU-rehearsal-{index}",
        )

    def _patch(self, owner, name, value) -> None:
        missing = object()
        old = vars(owner).get(name, missing) if isinstance(owner, type) else getattr(owner, name)
        self._undo.append(
            lambda: delattr(owner, name) if old is missing else setattr(owner, name, old)
        )
        setattr(owner, name, value)

    def _set_item(self, mapping, key, value) -> None:
        missing = object()
        old = mapping.get(key, missing)
        self._undo.append(
            lambda: mapping.pop(key, None) if old is missing else mapping.__setitem__(key, old)
        )
        mapping[key] = value

    def __enter__(self) -> Rehearsal:
        cuda, m = torch.cuda, self.machine
        self._frames = "_py_warnings" if "py314-warnings" in self.gaps else "warnings"
        patches = {
            "is_available": lambda: True,
            "device_count": lambda: self.gpus,
            "current_device": lambda: 0,
            "set_device": lambda device: self._check_index(device),
            "get_device_name": lambda device=None: self._properties(device).name,
            "get_device_properties": self._properties,
            "get_device_capability": lambda device=None: m.capability,
            "is_bf16_supported": lambda including_emulation=True: m.capability >= (8, 0),
            "synchronize": self._synchronize,
            "set_sync_debug_mode": self._set_sync_debug_mode,
            "get_sync_debug_mode": lambda: self._debug_mode,
            "Event": _Event,
            "manual_seed": lambda seed: None,
            "manual_seed_all": lambda seed: None,
            "is_initialized": lambda: True,
            "init": lambda: None,
        }
        patches |= {
            "is_current_stream_capturing": lambda: False,
            "current_stream": lambda device=None: _Stream(self),
            "default_stream": lambda device=None: _Stream(self),
        }
        for name, value in patches.items():
            self._patch(cuda, name, value)
        accelerator = {  # torch.accelerator (PyTorch 2.6+), which optimizers and loaders ask
            "is_available": lambda: True,
            "current_accelerator": lambda check_available=False: torch.device("cuda"),
            "device_count": lambda: self.gpus,
            "current_device_index": lambda: 0,
            "set_device_index": lambda device: self._check_index(device),
            "current_stream": lambda device=None: _Stream(self),
            "synchronize": self._synchronize,
        }
        for name, value in accelerator.items():
            if hasattr(torch, "accelerator") and hasattr(torch.accelerator, name):
                self._patch(torch.accelerator, name, value)
        self._patch(torch.backends.cudnn, "is_available", lambda: True)
        self._patch(torch.backends.cudnn, "version", lambda: 91000)
        self._patch(os, "cpu_count", lambda: m.cpus)
        if hasattr(os, "sched_getaffinity"):
            self._patch(os, "sched_getaffinity", lambda pid: set(range(m.cpus)))
        self._patch_autocast()
        self._patch_pinning()
        self._open_gaps()
        self._mode = _disguised(_Mode, self._frames)(self)
        self._mode.__enter__()
        _ACTIVE.append(self)
        return self

    def _check_index(self, device) -> None:
        if (device if isinstance(device, int) else _index(device)) >= self.gpus:
            raise RuntimeError("CUDA error: invalid device ordinal (the CUDA rehearsal)")

    def _patch_autocast(self) -> None:
        real = torch.amp.autocast_mode.autocast

        class autocast(real):  # noqa: N801 (torch's name)
            """CUDA autocast, run by CPU autocast's op lists (the rehearsal)."""

            def __init__(self, device_type, dtype=None, enabled=True, cache_enabled=None):
                host = "cpu" if device_type == "cuda" else device_type
                super().__init__(host, dtype=dtype, enabled=enabled, cache_enabled=cache_enabled)

        for owner in (torch, torch.amp, torch.amp.autocast_mode):
            self._patch(owner, "autocast", autocast)

    def _patch_pinning(self) -> None:
        from torch.utils.data._utils import pin_memory as loader_pinning

        def pin_memory(data, device=None):  # the loader's pin thread, which the mode does not see
            return _pin_tree(data, self.pinned)

        self._patch(loader_pinning, "pin_memory", pin_memory)

    def _open_gaps(self) -> None:
        for gap, modules in _MISSING_MODULES.items():
            if gap in self.gaps:
                for module in modules:  # None in sys.modules: `import` raises ImportError
                    self._set_item(sys.modules, module, None)
        if "compiler" in self.gaps:  # what a GPU machine without gcc gives Triton and Inductor
            self._set_item(os.environ, "CC", "/nonexistent/cc")
            self._set_item(os.environ, "CXX", "/nonexistent/c++")
            import torch._inductor.config as inductor

            self._patch(inductor.cpp, "cxx", (None, "/nonexistent/c++"))
        if "colab-pandas" in self.gaps:
            import pandas  # noqa: F401 (Colab's kernel imports it at start-up)

    def __exit__(self, *exc) -> None:
        _ACTIVE.remove(self)
        self._mode.__exit__(*exc)
        for undo in reversed(self._undo):
            undo()
        self._undo.clear()


def _pin_tree(data, pinned: _Places):
    if isinstance(data, torch.Tensor):
        out = _TO(data, "cpu", copy=True)
        pinned.add(out)
        return out
    if isinstance(data, dict):
        return type(data)({k: _pin_tree(v, pinned) for k, v in data.items()})
    if isinstance(data, list | tuple) and not hasattr(data, "_fields"):
        return type(data)(_pin_tree(v, pinned) for v in data)
    if hasattr(data, "_fields"):
        return type(data)(*(_pin_tree(v, pinned) for v in data))
    return data


def parse(spec: str) -> Rehearsal:
    """``"t4"``, ``"h100:8"`` or ``"t4:1:dali,compiler"`` (machine:gpus:gaps) as a Rehearsal."""
    machine, _, rest = spec.strip().partition(":")
    gpus, _, gaps = rest.partition(":")
    return Rehearsal(machine, gpus=int(gpus or 1), gaps=tuple(filter(None, gaps.split(","))))


_STARTUP = '''\
# The CUDA rehearsal (coursetools.rehearsal): this kernel runs the CUDA path on its CPU.
import os as _os

if _os.environ.get("{var}"):
    from coursetools import rehearsal as _rehearsal

    _rehearsal.KERNEL = _rehearsal.parse(_os.environ["{var}"]).__enter__()
    print(f"CUDA rehearsal on this CPU: {{_rehearsal.KERNEL}}")
'''
KERNEL: Rehearsal | None = None  # the kernel's own, entered by its start-up file


def ipython_dir(folder) -> str:
    """An IPYTHONDIR whose kernels rehearse the machine ``GPUCOURSE_REHEARSE`` names (unset: none)."""
    from pathlib import Path

    startup = Path(folder) / "profile_default" / "startup"
    startup.mkdir(parents=True, exist_ok=True)
    (startup / "00-cuda-rehearsal.py").write_text(_STARTUP.format(var=REHEARSE_VAR))
    return str(folder)
