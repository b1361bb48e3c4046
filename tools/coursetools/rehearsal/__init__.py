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
  synchronizing CUDA operation", attributed to the Python line that made the call. On CUDA no
  Python frame sits between that line and the warnings machinery; the rehearsal's own frames there
  carry the warnings module's name, so a referee that walks frames sees what it sees on CUDA.
  They are: a blocking copy to or from the device (``.to``, ``.cuda()``,
  ``.cpu()``, ``copy_``, ``Module.to``, ``torch.tensor(data, device=...)``), a read of a value
  (``.item()``, ``.tolist()``, ``bool()``, ``float()``, ``int()``, printing), and the operations
  whose output size is on the device (``nonzero``, boolean-mask indexing, ``masked_select``,
  ``unique``, ``torch.equal``). ``torch.cuda.synchronize()`` waits but, as on CUDA
  (``device_synchronize``), is not reported through that channel; it is counted apart. So is a
  non-blocking copy between the device and pageable host memory (``syncs.staged``): PyTorch issues
  ``cudaMemcpyAsync`` and reports nothing, but the driver may make the host wait for the stream to
  stage the memory (the CUDA Runtime API's "API synchronization behavior"). Memory from
  ``pin_memory()``, a ``DataLoader(pin_memory=True)`` or a non-blocking copy back to the host
  (``_to_copy`` pins it) is pinned: its copies run ahead.
- **Machines.** A T4 with 2 vCPUs as on Colab, an L4, an A100, an H100 with 16 cores, with 1 to 8
  GPUs (``MACHINES``); ``torch.cuda.get_device_properties`` and the CPU count say so.
- **Profiles and compiling.** A profile shows each reported synchronization as a
  ``cudaStreamSynchronize`` event and each ``torch.cuda.synchronize()`` as ``cudaDeviceSynchronize``
  (what CUPTI records); ``torch.compile`` returns the code as written (compiling is not modelled).
- **Gaps** (``GAPS``): no DALI, no TensorFlow, no RAPIDS, no compiler for ``torch.compile``,
  Colab's pandas imported at kernel start, Python 3.14's pure-Python warnings module.

What it cannot model: timings (nothing runs ahead of the host, so a sync costs nothing), kernels
and their numerics (fp16 and bf16 run CPU autocast's op lists), CUDA memory statistics (they raise
NotImplementedError), streams, compiling, several GPUs in one process (DataParallel; every device
tensor computes in the same host memory), NCCL and the ranks torchrun starts.

``Rehearsal(machine, gpus=, gaps=)`` is a context manager for a test's process;
a kernel rehearses from its start when ``GPUCOURSE_REHEARSE`` names a machine
(``coursetools.rehearsal.kernel``); ``python -m coursetools.rehearsal t4 NOTEBOOK`` runs a
lesson so and says which cells failed.
"""

from __future__ import annotations

import os
import sys
import types
from dataclasses import dataclass

import torch

from coursetools.rehearsal import fakes
from coursetools.rehearsal.mode import (
    SYNC_MESSAGE,
    Mode,
    Places,
    Syncs,
    disguised,
    index_of,
    pin_tree,
    profiled,
)

REHEARSE_VAR = "GPUCOURSE_REHEARSE"  # "t4", "h100:8", "t4:1:dali,compiler" (machine:gpus:gaps)
KERNEL = (
    None  # a kernel's own Rehearsal, entered by its start-up file (coursetools.rehearsal.kernel)
)
__all__ = ["GAPS", "MACHINES", "REHEARSE_VAR", "SYNC_MESSAGE", "Rehearsal", "parse"]


@dataclass(frozen=True)
class Machine:
    name: str
    capability: tuple[int, int]
    memory_gib: float
    processors: int  # streaming multiprocessors
    cpus: int  # the host's logical cores the notebook sees
    colab: bool = False


# Device facts: NVIDIA's data sheets and the CUDA programming guide's compute capabilities;
# CPU counts as the clouds rent them (Colab's T4: 2 vCPUs; GCP g2-standard-8 for the L4; a
# typical 16-core share of an H100 host).
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
        self.places, self.pinned, self.syncs = Places(), Places(), Syncs()
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
        profiled("cudaDeviceSynchronize")

    def _properties(self, device=None):
        index = 0 if device is None else index_of(device) if not isinstance(device, int) else device
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
            "Event": fakes.Event,
            "manual_seed": lambda seed: None,
            "manual_seed_all": lambda seed: None,
            "is_initialized": lambda: True,
            "init": lambda: None,
        }
        patches |= {
            "is_current_stream_capturing": lambda: False,
            "current_stream": lambda device=None: fakes.Stream(self),
            "default_stream": lambda device=None: fakes.Stream(self),
        }
        for name in fakes.MEMORY_STATISTICS:
            patches[name] = fakes.not_modelled(f"torch.cuda.{name}: CUDA memory statistics")
        patches["empty_cache"] = lambda: None
        for name, value in patches.items():
            self._patch(cuda, name, value)
        accelerator = {  # torch.accelerator (PyTorch 2.6+), which optimizers and loaders ask
            "is_available": lambda: True,
            "current_accelerator": lambda check_available=False: torch.device("cuda"),
            "device_count": lambda: self.gpus,
            "current_device_index": lambda: 0,
            "set_device_index": lambda device: self._check_index(device),
            "current_stream": lambda device=None: fakes.Stream(self),
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
        self._patch_profiler()
        self._patch(torch, "compile", fakes.eager)
        self._open_gaps()
        self._mode = disguised(Mode, self._frames)(self)
        self._mode.__enter__()
        fakes.ACTIVE.append(self)
        return self

    def _check_index(self, device) -> None:
        if (device if isinstance(device, int) else index_of(device)) >= self.gpus:
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
            return pin_tree(data, self.pinned)

        self._patch(loader_pinning, "pin_memory", pin_memory)

    def _patch_profiler(self) -> None:
        """The profiler records the CPU side only (there are no kernels to trace), and still
        synchronizes at its exit as on CUDA (``torch.autograd.profiler.profile.__exit__``)."""
        profile = torch.autograd.profiler.profile
        real_init = profile.__init__

        def __init__(prof, *args, **kwargs):
            real_init(prof, *args, **kwargs)
            if prof.use_device == "cuda":
                prof.kineto_activities.discard(torch.profiler.ProfilerActivity.CUDA)
                prof.profiler_kind = torch.autograd.profiler.ProfilerState.KINETO

        self._patch(profile, "__init__", __init__)

    def _open_gaps(self) -> None:
        for gap, modules in _MISSING_MODULES.items():
            if gap in self.gaps:
                for module in modules:  # None in sys.modules: `import` raises ImportError
                    self._set_item(sys.modules, module, None)
        if "compiler" in self.gaps:  # a GPU machine without gcc: nothing to build Triton's launcher
            import shutil

            import torch._inductor.config as inductor

            for name in ("CC", "CXX"):
                if name in os.environ:
                    self._set_item(os.environ, name, "")
            real_which = shutil.which

            def which(command, *args, **kwargs):
                found = real_which(command, *args, **kwargs)
                return None if found and os.path.basename(found) in fakes.COMPILERS else found

            self._patch(shutil, "which", which)
            self._patch(inductor.cpp, "cxx", (None, "/nonexistent/c++"))
        if "colab-pandas" in self.gaps:
            import pandas  # noqa: F401 (Colab's kernel imports it at start-up)

    def __exit__(self, *exc) -> None:
        fakes.ACTIVE.remove(self)
        self._mode.__exit__(*exc)
        for undo in reversed(self._undo):
            undo()
        self._undo.clear()


def parse(spec: str) -> Rehearsal:
    """``"t4"``, ``"h100:8"`` or ``"t4:1:dali,compiler"`` (machine:gpus:gaps) as a Rehearsal."""
    machine, _, rest = spec.strip().partition(":")
    gpus, _, gaps = rest.partition(":")
    return Rehearsal(machine, gpus=int(gpus or 1), gaps=tuple(filter(None, gaps.split(","))))
