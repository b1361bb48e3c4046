"""Time code on a CPU or GPU: ``torch.utils.benchmark`` with the course's habits (lesson 01
writes them out first)."""

import statistics
import timeit
from dataclasses import dataclass


@dataclass(frozen=True)
class Timing:  # seconds per call, as `benchmark` measured them
    median: float
    iqr: float
    runs: int
    device: str
    label: str = ""

    def __str__(self) -> str:
        scale, unit = next(
            ((s, u) for s, u in ((1, "s"), (1e3, "ms"), (1e6, "us")) if self.median * s >= 1),
            (1e9, "ns"),
        )
        return (
            f"{self.label + ': ' if self.label else ''}{self.median * scale:.3f} {unit} per call "
            f"(IQR {self.iqr * scale:.3f} {unit}, median of {self.runs} runs on {self.device})"
        )

    def rate(self, amount: float) -> float:  # amount per second: rate(2 * n**3) / 1e12 is TFLOP/s
        return amount / self.median


def benchmark(
    fn,
    *args,
    device=None,
    min_run_time: float = 0.2,
    min_runs: int = 3,
    warmup: int = 1,
    label: str = "",
    **kwargs,
) -> Timing:
    """Time ``fn(*args, **kwargs)``: warm-up, then the median and IQR of
    ``Timer.blocked_autorange`` runs on all threads."""
    import torch
    from torch.utils import benchmark as tb

    # waits for `cuda` below; the Timer's default timer waits only for the current GPU
    def clock() -> float:
        torch.cuda.synchronize(cuda)
        return timeit.default_timer()

    on_gpu = [
        v.device for v in (*args, *kwargs.values()) if isinstance(v, torch.Tensor) and v.is_cuda
    ]
    # `device`, else the first CUDA argument's
    cuda = torch.device(device if device is not None else (on_gpu or ["cpu"])[0])
    if cuda.type != "cuda":  # CPU work may still wait on queued GPU work
        cuda = (
            torch.device("cuda", torch.cuda.current_device()) if torch.cuda.is_available() else None
        )
    for _ in range(warmup):
        fn(*args, **kwargs)
    timer = tb.Timer(
        stmt="fn(*args, **kwargs)",
        globals={"fn": fn, "args": args, "kwargs": kwargs},
        timer=timeit.default_timer if cuda is None else clock,
        num_threads=torch.get_num_threads(),
    )
    times: list[float] = []
    # blocked_autorange times blocks of calls for min_run_time seconds
    while len(times) < max(min_runs, 2):
        times += timer.blocked_autorange(min_run_time=min_run_time).times
    q1, _, q3 = statistics.quantiles(times, n=4)
    return Timing(
        statistics.median(times), q3 - q1, len(times), str(device or cuda or "cpu"), label
    )
