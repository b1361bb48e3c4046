"""gpucourse.claims on a CPU, with a faked CUDA device: what a lesson prints, records and raises."""

from __future__ import annotations

import json
from types import SimpleNamespace

import coursekit as ck
import numpy as np
import pytest

import gpucourse
from gpucourse import claims


def test_a_claim_checks_on_cuda_says_one_sentence_elsewhere_records_and_raises_in_strict_mode(
    tmp_path, monkeypatch, capsys
):
    record = tmp_path / "claims.jsonl"
    monkeypatch.setenv(claims.CLAIMS_VAR, str(record))
    monkeypatch.delenv("GPUCOURSE_REQUIRE_GPU", raising=False)
    amp = dict(at_least=1.3, unit="x", source="PyTorch's AMP recipe")

    # On the CPU: one sentence saying what a GPU run checks, nothing checked, recorded as unchecked.
    assert claims.claim("AMP trains faster than fp32", 0.9, device="cpu", **amp) is None
    assert claims.needs("two GPUs for NCCL", False, device="cpu") is False
    cpu = capsys.readouterr().out
    assert cpu.count("\n") == 1 and cpu.startswith(
        "On a CUDA GPU this checks: AMP trains faster than fp32"
    )
    assert "at least 1.3x" in cpu and "here on cpu it is 0.9x, not checked" in cpu
    assert [json.loads(line)["checked"] for line in record.read_text().splitlines()] == [False] * 2
    record.unlink()  # the CUDA records below start a fresh file

    # On CUDA (faked: only the device's string matters): checked, printed, one JSON line each.
    assert (
        claims.claim("AMP trains faster than fp32", np.float32(2.0), device="cuda:0", **amp) is True
    )
    assert claims.claim("checkpointing keeps the peak", 0.95, device="cuda:1", at_most=0.8) is False
    assert claims.needs("two GPUs for NCCL", False, device="cuda:0", why="1 GPU visible") is False
    assert claims.needs("a C compiler for Inductor", True, device="cuda:0") is True
    out = capsys.readouterr().out
    assert (
        "GPU claim PASS on cuda:0: AMP trains faster than fp32: 2x, expected at least 1.3x"
        " (PyTorch's AMP recipe)." in out
    )
    assert (
        "GPU claim FAIL on cuda:1: checkpointing keeps the peak: 0.95, expected at most 0.8." in out
    )
    assert "Not validated on this GPU: two GPUs for NCCL (1 GPU visible)." in out
    lines = [json.loads(line) for line in record.read_text().splitlines()]
    assert [(e["kind"], e.get("passed", e.get("met"))) for e in lines] == [
        ("claim", True),
        ("claim", False),
        ("precondition", False),
        ("precondition", True),
    ]
    assert lines[0] == {
        "kind": "claim",
        "claim": "AMP trains faster than fp32",
        "measured": 2.0,
        "bound": "at least 1.3x",
        "unit": "x",
        "passed": True,
        "device": "cuda:0",
        "source": "PyTorch's AMP recipe",
    }
    assert lines[2]["what"] == "two GPUs for NCCL" and lines[2]["why"] == "1 GPU visible"

    # Strict mode (the GPU runner): a false claim is recorded, then raises, so the lesson fails.
    monkeypatch.setenv("GPUCOURSE_REQUIRE_GPU", "1")
    with pytest.raises(
        RuntimeError,
        match="GPU claim failed .*checkpointing keeps the peak: 0.95, expected at most 0.8",
    ):
        claims.claim("checkpointing keeps the peak", 0.95, device="cuda:0", at_most=0.8)
    assert json.loads(record.read_text().splitlines()[-1])["passed"] is False
    assert claims.claim("within bounds", 0.5, device="cuda:0", at_least=0.1, at_most=0.9) is True
    with pytest.raises(ValueError, match="needs a bound"):
        claims.claim("no bound", 1.0, device="cuda:0")


def test_off_cuda_a_claim_is_recorded_unchecked_with_its_value_on_cuda_as_passed_or_failed(
    tmp_path, monkeypatch, capsys
):
    """With GPUCOURSE_CLAIMS set (the GPU runner, a CPU rehearsal of it) a claim or precondition on
    a CPU is recorded with "checked": false and what was measured, never as a pass or a failure;
    on CUDA a claim passed or failed, and its record has no "checked" key."""
    record = tmp_path / "claims.jsonl"
    monkeypatch.setenv(claims.CLAIMS_VAR, str(record))
    monkeypatch.setenv("GPUCOURSE_REQUIRE_GPU", "1")  # strict: still nothing raises off CUDA
    amp = dict(at_least=1.3, unit="x", source="PyTorch's AMP recipe")
    assert claims.claim("AMP trains faster", np.float32(0.5), device="cpu", **amp) is None
    assert claims.needs("two GPUs for NCCL", False, device="cpu", why="no GPU") is False
    out = capsys.readouterr().out  # printed as before: one sentence, no "not validated"
    assert out == (
        "On a CUDA GPU this checks: AMP trains faster"
        " (at least 1.3x; here on cpu it is 0.5x, not checked).\n"
    )
    monkeypatch.delenv("GPUCOURSE_REQUIRE_GPU")
    assert claims.claim("AMP trains faster", 2.0, device="cuda:0", **amp) is True
    assert claims.claim("AMP trains faster", 1.1, device="cuda:1", **amp) is False
    assert claims.needs("two GPUs for NCCL", True, device="cuda:0") is True

    cpu, precondition, passed, failed, met = map(json.loads, record.read_text().splitlines())
    assert cpu == {
        "kind": "claim",
        "claim": "AMP trains faster",
        "measured": 0.5,
        "bound": "at least 1.3x",
        "unit": "x",
        "passed": None,
        "checked": False,
        "device": "cpu",
        "source": "PyTorch's AMP recipe",
    }
    assert precondition == {
        "kind": "precondition",
        "what": "two GPUs for NCCL",
        "met": False,
        "why": "no GPU",
        "checked": False,
        "device": "cpu",
    }
    unchecked = {k: v for k, v in cpu.items() if k != "checked"}
    assert passed == {**unchecked, "measured": 2.0, "passed": True, "device": "cuda:0"}
    assert failed == {**unchecked, "measured": 1.1, "passed": False, "device": "cuda:1"}
    assert "checked" not in met and met["met"] is True


def test_deferred_strict_mode_prints_and_records_a_failed_claim_and_goes_on(
    tmp_path, monkeypatch, capsys
):
    """GPUCOURSE_CLAIMS_DEFER=1 (the GPU runner): in strict mode a failed claim does not raise, so
    the claims after it are still measured; the record says it failed."""
    record = tmp_path / "claims.jsonl"
    monkeypatch.setenv(claims.CLAIMS_VAR, str(record))
    monkeypatch.setenv("GPUCOURSE_REQUIRE_GPU", "1")
    monkeypatch.setenv(claims.DEFER_VAR, "1")
    assert claims.claim("pinned copies are faster", 0.8, device="cuda:0", at_least=1.0) is False
    assert claims.claim("the next claim still runs", 2.0, device="cuda:0", at_least=1.0) is True
    out = capsys.readouterr().out
    assert "GPU claim FAIL on cuda:0: pinned copies are faster: 0.8, expected at least 1." in out
    assert "GPUCOURSE_CLAIMS_DEFER=1: the lesson goes on" in out
    assert [json.loads(line)["passed"] for line in record.read_text().splitlines()] == [False, True]

    # Deferring changes nothing on a CPU; without strict mode nothing raises anyway.
    assert claims.claim("pinned copies are faster", 0.8, device="cpu", at_least=1.0) is None
    monkeypatch.setenv(claims.DEFER_VAR, "0")  # any other value: strict mode raises as before
    with pytest.raises(RuntimeError, match="pinned copies are faster"):
        claims.claim("pinned copies are faster", 0.8, device="cuda:0", at_least=1.0)
    monkeypatch.delenv("GPUCOURSE_REQUIRE_GPU")
    monkeypatch.setenv(claims.DEFER_VAR, "1")
    assert claims.claim("pinned copies are faster", 0.8, device="cuda:0", at_least=1.0) is False
    # not strict: the usual FAIL line only
    assert "GPUCOURSE_CLAIMS_DEFER" not in capsys.readouterr().out


def test_a_claim_whose_measurement_did_not_happen_neither_passes_nor_fails(
    tmp_path, monkeypatch, capsys
):
    """measured=None (no DALI, no compiler): recorded as not run, even in strict mode on CUDA."""
    record = tmp_path / "claims.jsonl"
    monkeypatch.setenv(claims.CLAIMS_VAR, str(record))
    monkeypatch.setenv("GPUCOURSE_REQUIRE_GPU", "1")
    assert claims.claim("DALI decodes on the GPU", None, device="cuda:0", at_least=1) is None
    assert "Did not run here: DALI decodes on the GPU (at least 1)" in capsys.readouterr().out
    (entry,) = [json.loads(line) for line in record.read_text().splitlines()]
    assert (entry["passed"], entry["checked"], entry["measured"]) == (None, False, None)


# The GPU checks of lessons 01-04, run on a CPU with fake measurements: each cell tagged
# `gpu-check` is taken from the solution and executed as it stands, its device faked as CUDA, in
# strict mode, so a failed claim raises. A broken path's numbers must fail it, a right one's pass.
@pytest.fixture
def strict(run_cell):
    """Run a lesson's GPU check as the GPU runner does (strict, recorded); returns its records."""

    def run(lesson, title, **names):
        namespace = {"gpucourse": gpucourse, "device": "cuda:0", **names}
        return run_cell(ck.gpu_check(lesson, title), namespace, strict=True)

    return run


def test_lesson_02_pinned_copy_checks(strict, monkeypatch):
    lesson = "02_tensors_on_device"
    right = {"pageable": [0.1, 6.0], "pinned": [0.2, 12.0], "pin_then_copy": [0.1, 5.0]}
    strict(lesson, "pinned copies are faster than pageable", curve=right)
    with pytest.raises(RuntimeError, match="faster than from pageable memory"):
        no_gain = {**right, "pinned": [0.2, 5.9]}  # a copy that still goes through staging
        strict(lesson, "pinned copies are faster than pageable", curve=no_gain)
    # no pinned memory (no CUDA): nothing to check, nothing raised, nothing recorded
    assert strict(lesson, "pinned copies are faster than pageable", curve={"pageable": [1.0]}) == []

    # pin_memory() right before the copy: compared with memory pinned once, never with pageable
    many_cores = {"pageable": [10.0], "pinned": [25.0], "pin_then_copy": [14.0]}  # beats pageable
    strict(lesson, "pin_memory() right before the copy", curve=many_cores)
    with pytest.raises(RuntimeError, match="at least 10% slower"):
        free_pinning = {**many_cores, "pin_then_copy": [24.5]}  # as if pinning cost nothing
        strict(lesson, "pin_memory() right before the copy", curve=free_pinning)

    # the link: 30% of the card's PCIe x16 rate, one way (bench's table), which a PCIe 3.0 host
    # under a 4.0 card meets and an x4 slot does not; unknown card: not checked
    monkeypatch.setattr(gpucourse, "device_facts", lambda device: SimpleNamespace(name="Tesla T4"))
    t4 = {"pageable": [6.0], "pinned": [12.3], "pin_then_copy": [5.0]}
    strict(lesson, "30% of the card's PCIe link", curve=t4)
    with pytest.raises(RuntimeError, match="30% of the card's 16 GB/s"):
        strict(lesson, "30% of the card's PCIe link", curve={**t4, "pinned": [3.6]})  # x4 slot
    a100 = lambda device: SimpleNamespace(name="NVIDIA A100-SXM4-40GB")  # noqa: E731
    monkeypatch.setattr(gpucourse, "device_facts", a100)
    strict(lesson, "30% of the card's PCIe link", curve={**t4, "pinned": [12.0]})  # a Gen3 host
    monkeypatch.setattr(
        gpucourse, "device_facts", lambda device: SimpleNamespace(name="Tesla P100")
    )
    records = strict(lesson, "30% of the card's PCIe link", curve=t4)
    assert records[-1]["kind"] == "precondition" and records[-1]["met"] is False


def test_lesson_03_interleaving_keeps_clock_drift_off_one_setting():
    namespace = {}
    exec(ck.code_cell("03_batching_pipelines", "def interleaved("), namespace)
    calls = []

    def drifting(setting):  # the same speed for both settings; the clock slows 8% per run
        calls.append(setting)
        return 10.0 * 1.08 ** len(calls)

    off_on = namespace["interleaved"](drifting, [False, True])
    assert calls == [False, True] * 3
    assert off_on[True] / off_on[False] < 1.15  # what the check allows; measured in a row: 1.26
    assert (10.0 * 1.08**4) / (10.0 * 1.08**1) > 1.15


def test_lesson_03_checks(strict):
    lesson = "03_batching_pipelines"
    strict(lesson, "the largest batch runs at least 4x", rates={1: 400.0, 256: 9000.0})
    with pytest.raises(RuntimeError, match="at least 4x"):
        strict(lesson, "the largest batch runs at least 4x", rates={1: 400.0, 256: 1000.0})
    cudnn = {"cudnn.benchmark off (default)": 20.0, "cudnn.benchmark on": 19.0}
    strict(lesson, "cudnn.benchmark on is no slower", cudnn_ms=cudnn)

    def row(wait_s, batches=32):
        return SimpleNamespace(wait_s=wait_s, batches=batches)

    # the naive row decodes on one thread, the tuned one in parallel, then from its cache
    strict(lesson, "the naive tf.data pipeline waits", tf_stats=[row(1.3), row(0.2)])
    strict(lesson, "the naive tf.data pipeline waits", tf_stats=[row(1.3), row(0.0)])  # no 1/0
    with pytest.raises(RuntimeError, match="waits at least 1.5x"):  # still parallelized by TF
        strict(lesson, "the naive tf.data pipeline waits", tf_stats=[row(0.25), row(0.2)])
    assert strict(lesson, "the naive tf.data pipeline waits", tf_stats=[]) == []  # no TensorFlow
