"""Time code correctly on a CPU and on a GPU.

CUDA kernels run asynchronously: ``a @ b`` returns as soon as the work is
queued. ``benchmark`` builds on ``torch.utils.benchmark.Timer``, which
synchronizes CUDA around every measurement, warms up first, uses all the
threads PyTorch uses (``Timer`` defaults to one), and reports the median of
many runs with its interquartile range.
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


def benchmark(
    fn, *args, device=None, min_run_time: float = 0.2, min_runs: int = 5, warmup: int = 1, label: str = "", **kwargs
) -> Timing:
    """Time ``fn(*args, **kwargs)``: warm-up, then the median of repeated runs.

    Each run is a ``torch.utils.benchmark.Timer.timeit`` block, long enough
    (about 10 ms) that the timer's own overhead does not count, and synchronized
    with the GPU whenever one is present. Runs repeat for ``min_run_time``
    seconds and at least ``min_runs`` times. ``device`` only labels the result.
    """
    import logging
    import statistics

    import torch

    # torch.utils.benchmark imports cpp_extension, which logs a warning about
    # CUDA_HOME on machines without the CUDA toolkit: noise for a learner.
    logging.getLogger("torch.utils.cpp_extension").setLevel(logging.ERROR)
    from torch.utils import benchmark as tb

    for _ in range(warmup):
        fn(*args, **kwargs)
    timer = tb.Timer(
        stmt="fn(*args, **kwargs)",
        globals={"fn": fn, "args": args, "kwargs": kwargs},
        num_threads=torch.get_num_threads(),  # Timer's default is one thread
    )
    once = timer.timeit(number=1).median
    number = max(1, int(0.01 / max(once, 1e-9)))
    runs = max(min_runs, min(1000, int(min_run_time / max(once * number, 1e-9))))
    times = [timer.timeit(number=number).median for _ in range(runs)]
    quartiles = statistics.quantiles(times, n=4)
    if device is None:
        device = "cuda" if torch.cuda.is_available() else "cpu"
    return Timing(
        median=statistics.median(times),
        iqr=quartiles[2] - quartiles[0],
        runs=runs,
        device=str(device),
        label=label,
    )
