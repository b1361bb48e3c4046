"""What the rehearsal puts in CUDA's place where there is nothing to compute: events on the host
clock, the one stream, and the parts it does not model (memory statistics, compiling)."""

from __future__ import annotations

import time


class Event:
    """torch.cuda.Event on the host clock (elapsed_time in milliseconds, as CUDA's)."""

    def __init__(self, enable_timing=False, blocking=False, interprocess=False):
        self.at, self._rehearsal = None, ACTIVE[-1] if ACTIVE else None

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


class Stream:
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


ACTIVE: list = []  # the rehearsals entered, the innermost last


COMPILERS = {"cc", "c++", "gcc", "g++", "clang", "clang++"}
MEMORY_STATISTICS = (
    "memory_allocated", "max_memory_allocated", "memory_reserved", "max_memory_reserved",
    "reset_peak_memory_stats", "memory_stats", "memory_summary", "mem_get_info",
    "set_per_process_memory_fraction", "memory_snapshot",
)  # fmt: skip


def not_modelled(what: str):
    def call(*args, **kwargs):
        raise NotImplementedError(f"{what} are not modelled by the CUDA rehearsal (run on a GPU)")

    return call


def eager(model=None, **options):
    """torch.compile, not modelled: the code runs as written (as where compiling fell back)."""
    return (lambda fn: fn) if model is None else model
