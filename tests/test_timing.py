"""gpucourse.timing on workloads of known duration, so the bounds cannot flake."""

import time

import pytest

import gpucourse


def test_measures_a_known_duration():
    timing = gpucourse.benchmark(time.sleep, 0.02, min_run_time=0.1, label="sleep")
    assert 0.02 <= timing.median < 0.2, "sleep(0.02) never returns early and rarely takes 10x longer"
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


def test_rate():
    timing = gpucourse.Timing(median=0.5, iqr=0.0, runs=5, device="cpu")
    assert timing.rate(10) == pytest.approx(20)


@pytest.mark.parametrize("seconds,unit", [(2.0, " s "), (0.002, " ms "), (2e-6, " us "), (2e-9, " ns ")])
def test_units(seconds, unit):
    assert unit in str(gpucourse.Timing(median=seconds, iqr=0, runs=5, device="cpu"))
