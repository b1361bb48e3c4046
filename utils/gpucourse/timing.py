"""Time code correctly on a CPU and on a GPU.

CUDA kernels run asynchronously: ``a @ b`` returns as soon as the work is
queued. Lesson 01 writes the correct stopwatch out in its cells (warm-up,
``torch.cuda.synchronize()``, median of repeats) and then calls
``torch.utils.benchmark.Timer(...).blocked_autorange()``; ``benchmark`` is that
call with three course habits: it synchronizes the GPU the work runs on (the
Timer's default synchronizes only the current one), uses all the threads
PyTorch uses (the Timer's default is one), and reports the median with its
interquartile range.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Timing:
    """The result of ``benchmark``: seconds per call."""

    median: float
    iqr: float
    runs: int
    device: str
    label: str = ""

    def __str__(self) -> str:
        scale, unit = _unit(self.median)
        name = f"{self.label}: " if self.label else ""
        return (
            f"{name}{self.median * scale:.3f} {unit} per call "
            f"(IQR {self.iqr * scale:.3f} {unit}, median of {self.runs} runs on {self.device})"
        )

    def rate(self, amount: float) -> float:
        """``amount`` per second, e.g. ``rate(2 * n**3) / 1e12`` for TFLOP/s."""
        return amount / self.median


def _unit(seconds: float) -> tuple[float, str]:
    for scale, unit in ((1, "s"), (1e3, "ms"), (1e6, "us")):
        if seconds * scale >= 1:
            return scale, unit
    return 1e9, "ns"


def _cuda_device(device, values):
    """The CUDA device to wait for: ``device`` if it is one, else the first CUDA tensor among ``values``."""
    import torch

    if device is not None:
        device = torch.device(device)
        return device if device.type == "cuda" else None
    return next((v.device for v in values if isinstance(v, torch.Tensor) and v.is_cuda), None)


def benchmark(
    fn, *args, device=None, min_run_time: float = 0.2, min_runs: int = 3, warmup: int = 1, label: str = "", **kwargs
) -> Timing:
    """Time ``fn(*args, **kwargs)``: warm-up, then the median of repeated, synchronized runs.

    ``Timer.blocked_autorange`` times blocks of calls (long enough that reading
    the clock costs nothing) for ``min_run_time`` seconds, synchronizing the GPU
    before each reading of the clock; blocks repeat until there are ``min_runs``.
    The GPU synchronized is ``device`` when it is a CUDA device, else the one of
    the first CUDA tensor among the arguments.
    """
    import logging
    import statistics
    import timeit

    import torch

    # torch.utils.benchmark imports cpp_extension, which logs a warning about
    # CUDA_HOME on machines without the CUDA toolkit: noise for a learner.
    logging.getLogger("torch.utils.cpp_extension").setLevel(logging.ERROR)
    from torch.utils import benchmark as tb

    cuda = _cuda_device(device, [*args, *kwargs.values()])
    if cuda is None and torch.cuda.is_available():
        cuda = torch.device("cuda", torch.cuda.current_device())  # CPU work may still wait on queued GPU work

    def clock() -> float:
        torch.cuda.synchronize(cuda)  # this GPU, not merely the current one
        return timeit.default_timer()

    for _ in range(warmup):
        fn(*args, **kwargs)
    timer = tb.Timer(stmt="fn(*args, **kwargs)", globals={"fn": fn, "args": args, "kwargs": kwargs},
                     timer=timeit.default_timer if cuda is None else clock, num_threads=torch.get_num_threads())  # Timer's default is one thread
    times: list[float] = []
    while len(times) < max(min_runs, 2):
        times += timer.blocked_autorange(min_run_time=min_run_time).times
    quartiles = statistics.quantiles(times, n=4)
    if device is None:
        device = cuda or "cpu"
    return Timing(median=statistics.median(times), iqr=quartiles[2] - quartiles[0], runs=len(times),
                  device=str(device), label=label)
