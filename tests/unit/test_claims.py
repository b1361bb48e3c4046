"""gpucourse.claims on a CPU, with a faked CUDA device: what a lesson prints, records and raises."""

from __future__ import annotations

import json

import numpy as np
import pytest

from gpucourse import claims


def test_a_claim_checks_on_cuda_says_one_sentence_elsewhere_records_and_raises_in_strict_mode(
    tmp_path, monkeypatch, capsys
):
    record = tmp_path / "claims.jsonl"
    monkeypatch.setenv(claims.CLAIMS_VAR, str(record))
    monkeypatch.delenv("GPUCOURSE_REQUIRE_GPU", raising=False)
    amp = dict(at_least=1.3, unit="x", source="PyTorch's AMP recipe")

    # On the CPU: one sentence saying what a GPU run checks, nothing checked, nothing recorded.
    assert claims.claim("AMP trains faster than fp32", 0.9, device="cpu", **amp) is None
    assert claims.needs("two GPUs for NCCL", False, device="cpu") is False
    cpu = capsys.readouterr().out
    assert cpu.count("\n") == 1 and cpu.startswith(
        "On a CUDA GPU this checks: AMP trains faster than fp32"
    )
    assert "at least 1.3x" in cpu and "here on cpu it is 0.9x, not checked" in cpu
    assert not record.exists()

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
    assert (
        "GPUCOURSE_CLAIMS_DEFER" not in capsys.readouterr().out
    )  # not strict: the usual FAIL line only
