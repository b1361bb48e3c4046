"""gpucourse.timing on workloads of known duration, so the bounds cannot flake."""

import time

import pytest

import gpucourse


def test_measures_a_known_duration():
    timing = gpucourse.benchmark(time.sleep, 0.02, min_run_time=0.1, label="sleep")
    assert 0.02 <= timing.median < 0.2, (
        "sleep(0.02) never returns early and rarely takes 10x longer"
    )
    assert timing.runs >= 5
    assert timing.iqr >= 0
    assert "sleep" in str(timing) and "ms" in str(timing)


def test_warm_up_is_not_timed():
    calls = []

    def first_call_is_slow():
        if not calls:
            time.sleep(0.5)
        calls.append(1)

    timing = gpucourse.benchmark(first_call_is_slow, min_run_time=0.05)
    assert timing.median < 0.1, "the slow first call must be the warm-up, outside the measurement"


def test_passes_arguments_and_keywords():
    seen = []
    gpucourse.benchmark(lambda a, *, b: seen.append((a, b)), 1, b=2, min_run_time=0.01)
    assert set(seen) == {(1, 2)}


@pytest.mark.parametrize(
    "seconds,unit", [(2.0, " s "), (0.002, " ms "), (2e-6, " us "), (2e-9, " ns ")]
)
def test_units(seconds, unit):
    assert unit in str(gpucourse.timing.Timing(median=seconds, iqr=0, runs=5, device="cpu"))


def test_synchronizes_the_gpu_it_measures_not_the_current_one(monkeypatch):
    """`bench --device cuda:1` must wait for cuda:1; the Timer's default waits only for the
    current GPU."""
    import torch

    synced = []
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: synced.append(device))
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    timing = gpucourse.benchmark(lambda: None, device="cuda:1", min_run_time=0.01)
    assert synced and set(synced) == {torch.device("cuda", 1)}, f"synchronized {set(synced)}"
    assert timing.device == "cuda:1"


def test_a_slow_call_runs_few_times():
    """Slow work is timed in blocks of one call, not the old Timer.timeit's hidden extra calls
    per run."""
    calls = []
    gpucourse.benchmark(lambda: (calls.append(1), time.sleep(0.05)), min_run_time=0.01, min_runs=3)
    assert len(calls) <= 1 + 3 * 2, (
        f"{len(calls)} calls for 3 runs: warm-up + one estimate + one run per block"
    )
