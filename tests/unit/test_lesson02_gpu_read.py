"""Lesson 02's copy measurements against the course's first GPU run (one H200), pinned on a CPU.

The H200's curve (`gpu-run-3`, torch 2.11.0+cu130, GB/s from 4 KiB to 1 GiB, each size 4x the
last) is kept below as data: the lesson's prose quotes it, and its checks must accept it while
rejecting the broken path each one names. The cells under test are read from the solution.
"""

from __future__ import annotations

import re
from types import SimpleNamespace

import coursekit as ck
import pytest
import torch
from coursetools.rehearsal import Rehearsal

import gpucourse

LESSON = "02_tensors_on_device"
SIZES = [2**k for k in range(12, 31, 2)]  # 4 KiB ... 1 GiB
H200 = {  # this course's GPU run on an H200 (gpu-run-3), the curve cell's output
    "pageable": [0.3, 1.04, 2.62, 7.83, 10.64, 10.71, 11.11, 6.23, 4.77, 5.19],
    "pinned": [0.36, 1.25, 4.22, 13.57, 30.14, 43.97, 51.29, 52.88, 52.79, 52.67],
    "pin_then_copy": [0.26, 0.76, 0.01, 0.03, 0.13, 0.53, 2.06, 8.4, 11.19, 18.12],
}
H200_LAUNCH_MS = (0.16, 0.43)  # the same VM's launches: the no-sync copy, lesson 01's matmuls


@pytest.fixture
def strict(run_cell):
    """Run one of the lesson's GPU checks as the GPU runner does (strict: a failure raises)."""

    def run(title: str, **names) -> list[dict]:
        namespace = {"gpucourse": gpucourse, "device": "cuda:0", **names}
        return run_cell(ck.gpu_check(LESSON, title), namespace, strict=True)

    return run


def _ms_per_call(gbps: float, nbytes: int) -> float:
    return nbytes / (gbps * 1e9) * 1e3


def test_the_h200_curve_is_what_the_text_says_it_is():
    """pin_then_copy: a fixed ~8 ms a call from 64 KiB to 64 MiB, µs below; it loses to pageable
    up to 16 MiB and wins from 64 MiB, and never gets near memory pinned once."""
    pin_then_copy, pageable, pinned = H200["pin_then_copy"], H200["pageable"], H200["pinned"]
    fixed = [_ms_per_call(g, n) for g, n in zip(pin_then_copy, SIZES, strict=True)]
    assert all(6 < ms < 9 for ms in fixed[2:8]), fixed  # 64 KiB (0.01 GB/s, rounded) to 64 MiB
    assert all(0.015 < ms < 0.023 for ms in fixed[:2]), fixed  # 4 and 16 KiB: 16 to 22 µs
    assert all(p < q for p, q in zip(pin_then_copy[:7], pageable[:7], strict=True))
    assert all(p > q for p, q in zip(pin_then_copy[7:], pageable[7:], strict=True))
    assert pin_then_copy[-1] / pageable[-1] > 3  # 1 GiB: 3.5x faster than pageable there
    assert pin_then_copy[-1] / pinned[-1] < 0.5  # and a third of memory pinned once
    assert max(pageable) == pageable[6] and all(4.5 < g < 5.5 for g in pageable[8:])


def test_the_prose_quotes_the_h200_run_and_no_longer_says_pinning_per_copy_never_wins():
    text = "\n".join(
        c.source for c in ck.read(ck.solution_path(LESSON)).cells if c.cell_type == "markdown"
    )
    ptc, pageable = H200["pin_then_copy"][-3:], H200["pageable"][-3:]
    rates = [", ".join(f"{g:.1f}" for g in r[:-1]) + f" and {r[-1]:.1f}" for r in (ptc, pageable)]
    quoted = f"{rates[0]} GB/s against {rates[1]}"  # 64 MiB, 256 MiB and 1 GiB
    assert text.count(quoted) >= 2, quoted  # how to read the curve, and Exercise 5's answer
    assert f"{max(H200['pinned']):.1f} GB/s" in text  # the link figure, labelled with its run
    assert "about 8 ms" in text and "12-13" not in text  # an unlabelled T4 figure is gone
    assert "usually no faster than `pageable`" not in text
    assert "On Colab" not in text.split("### Exercise 5")[1].split("### BEGIN SOLUTION")[0]


@pytest.mark.parametrize(
    "curve, passes",
    [
        ({"pageable": H200["pageable"], "pinned": H200["pinned"]}, True),  # the H200: 10.2x
        ({"pageable": [0.2, 6.0], "pinned": [0.3, 12.0]}, True),  # a T4, by estimate: ~2x
        ({"pageable": [0.2, 6.0], "pinned": [0.2, 6.0]}, False),  # never pinned: 1.0
        ({"pageable": [0.2, 6.0], "pinned": [0.2, 7.2]}, False),  # never pinned, 20% noise
    ],
)
def test_the_pinned_check_rejects_a_source_that_was_never_pinned(strict, curve, passes):
    curve = {**curve, "pin_then_copy": [0.1, 1.0]}
    title = "pinned copies are faster than pageable"
    if passes:
        (entry,) = strict(title, curve=curve)
        assert entry["passed"] is True
    else:
        with pytest.raises(RuntimeError, match="faster than from pageable memory"):
            strict(title, curve=curve)


def _nbytes(device) -> int:
    """The size of the lesson's non-blocking copy on ``device``, from the cell's own line."""
    (source,) = [
        line
        for line in ck.code_cell(LESSON, "n = gpucourse.workload(device, cpu=512").splitlines()
        if line.startswith("nbytes = ")
    ]
    namespace = {"gpucourse": gpucourse, "device": device}
    exec(source, namespace)
    return namespace["nbytes"]


@pytest.mark.parametrize("machine", ["t4", "h100"])
def test_the_no_sync_copy_is_a_gibibyte_on_every_gpu_and_small_elsewhere(monkeypatch, machine):
    monkeypatch.delenv("NBGRADER_EXECUTION", raising=False)
    with Rehearsal(machine):
        assert _nbytes(torch.device("cuda", 0)) == 2**30
    assert _nbytes(torch.device("cpu")) == 2**24
    monkeypatch.setenv("NBGRADER_EXECUTION", "autograde")
    assert _nbytes(torch.device("cpu")) == 2**20


def test_the_no_sync_bound_leaves_room_for_the_slowest_launch_the_h200_vm_showed(strict):
    """At 256 MiB the H200 VM's slowest launch (0.43 ms) would have read 0.084 against a bound
    of 0.1; at 1 GiB it reads 0.021, and a T4's copy is four times longer still."""
    bound = float(re.search(r"at_most=([0-9.]+)", ck.gpu_check(LESSON, "times only the launch"))[1])
    slowest = max(H200_LAUNCH_MS)
    old = slowest / _ms_per_call(H200["pinned"][-2], 2**28)
    new = slowest / _ms_per_call(H200["pinned"][-1], 2**30)
    assert old > 0.8 * bound and new < 0.25 * bound
    assert slowest / _ms_per_call(12.0, 2**30) < 0.01  # a T4 over PCIe 3.0 (~12 GB/s, estimate)

    copy, matmul = "copy 1024 MiB, pinned, non_blocking", "8192 x 8192 matmul"
    right = {
        copy: {"no sync (ms)": slowest, "sync (ms)": 20.4, "benchmark (ms)": 20.4},
        matmul: {"no sync (ms)": slowest, "sync (ms)": 21.8, "benchmark (ms)": 21.5},
    }
    entries = strict("times only the launch", timings=right, can_pin=True)
    assert [e["passed"] for e in entries] == [True, True]
    blocking = {**right, copy: {**right[copy], "no sync (ms)": 20.1}}  # the copy did not queue
    with pytest.raises(RuntimeError, match="only the launch is timed"):
        strict("times only the launch", timings=blocking, can_pin=True)


def _pin_time_ms(can_pin: bool, benchmark) -> dict:
    namespace = {
        "torch": torch,
        "can_pin": can_pin,
        "gpucourse": SimpleNamespace(benchmark=benchmark),
    }
    exec(ck.code_cell(LESSON, "def pin_time_ms("), namespace)
    return namespace


@pytest.mark.parametrize("can_pin", [False, True])
def test_pin_time_ms_times_the_host_copy_on_the_threads_asked_and_gives_them_back(
    monkeypatch, can_pin
):
    seen = []

    def benchmark(fn, **kwargs):
        seen.append((torch.get_num_threads(), fn.__name__))
        out = fn()
        assert out.dtype == torch.uint8 and out.numel() == 2**16
        return SimpleNamespace(median=2e-6)

    if can_pin:  # pinning needs CUDA: a stand-in that copies as pin_memory() does
        monkeypatch.setattr(torch.Tensor, "pin_memory", lambda self: self.clone())
    before = torch.get_num_threads()
    pin_time_ms = _pin_time_ms(can_pin, benchmark)["pin_time_ms"]
    assert pin_time_ms(2**16, 1) == pytest.approx(2e-3)  # ms
    assert seen == [(1, "<lambda>" if can_pin else "clone")]
    assert torch.get_num_threads() == before

    def failing(fn, **kwargs):
        raise RuntimeError("out of pinned memory")

    with pytest.raises(RuntimeError):
        _pin_time_ms(can_pin, failing)["pin_time_ms"](2**16, 1)
    assert torch.get_num_threads() == before  # given back on an error too


def test_pin_time_ms_runs_on_the_rehearsed_cuda_path():
    """On the CUDA path (rehearsed: pin_memory() returns a pinned copy), the same function."""
    with Rehearsal("t4"):
        namespace = {"torch": torch, "can_pin": True, "gpucourse": gpucourse}
        exec(ck.code_cell(LESSON, "def pin_time_ms("), namespace)
        assert namespace["pin_time_ms"](2**12, 1) > 0
