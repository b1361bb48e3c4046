"""Time code correctly on a CPU and a GPU: ``torch.utils.benchmark`` with the course's habits (lesson 01 writes it out).

``benchmark`` synchronizes the GPU the work runs on (the Timer's default waits only for the current one),
uses all of PyTorch's threads (the Timer's default is one) and reports the median with its interquartile range.
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
        scale, unit = next(((s, u) for s, u in ((1, "s"), (1e3, "ms"), (1e6, "us")) if self.median * s >= 1), (1e9, "ns"))
        return (f"{self.label + ': ' if self.label else ''}{self.median * scale:.3f} {unit} per call "
                f"(IQR {self.iqr * scale:.3f} {unit}, median of {self.runs} runs on {self.device})")

    def rate(self, amount: float) -> float:
        """``amount`` per second, e.g. ``rate(2 * n**3) / 1e12`` for TFLOP/s."""
        return amount / self.median


def benchmark(fn, *args, device=None, min_run_time: float = 0.2, min_runs: int = 3, warmup: int = 1, label: str = "",
              **kwargs) -> Timing:
    """Time ``fn(*args, **kwargs)``: warm-up, then the median of synchronized ``Timer.blocked_autorange`` runs."""
    import logging
    import statistics
    import timeit

    import torch

    logging.getLogger("torch.utils.cpp_extension").setLevel(logging.ERROR)  # its CUDA_HOME warning is noise here
    from torch.utils import benchmark as tb

    # the GPU to wait for: `device` if it is one, else that of the first CUDA tensor argument, else the current one
    cuda = torch.device(device) if device is not None else next(
        (v.device for v in [*args, *kwargs.values()] if isinstance(v, torch.Tensor) and v.is_cuda), None)
    if cuda is None or cuda.type != "cuda":  # CPU work may still wait on queued GPU work
        cuda = torch.device("cuda", torch.cuda.current_device()) if torch.cuda.is_available() else None

    def clock() -> float:
        torch.cuda.synchronize(cuda)
        return timeit.default_timer()

    for _ in range(warmup):
        fn(*args, **kwargs)
    timer = tb.Timer(stmt="fn(*args, **kwargs)", globals={"fn": fn, "args": args, "kwargs": kwargs},
                     timer=timeit.default_timer if cuda is None else clock, num_threads=torch.get_num_threads())
    times: list[float] = []
    while len(times) < max(min_runs, 2):  # blocked_autorange times blocks of calls for min_run_time seconds
        times += timer.blocked_autorange(min_run_time=min_run_time).times
    q1, _, q3 = statistics.quantiles(times, n=4)
    return Timing(statistics.median(times), q3 - q1, len(times), str(device or cuda or "cpu"), label)
