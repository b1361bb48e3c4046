"""gpucourse.bench: the card table, the ratio logic with made-up devices, and the command line on
a CPU."""

from __future__ import annotations

import json

import pytest
import torch

from gpucourse import __main__ as cli
from gpucourse import bench

no_cuda = pytest.mark.skipif(
    torch.cuda.is_available(), reason="checks what the bench says where CUDA is missing"
)
QUICK = ["--device", "cpu", "--size", "64", "--min-run-time", "0.01"]


@pytest.mark.parametrize(
    "name,label",
    [
        ("NVIDIA H100 80GB HBM3", "H100 SXM"),  # the SXM card says HBM3, not SXM
        ("NVIDIA H100 PCIe", "H100 PCIe"),  # same chip, other peaks
        # a variant the course has no peaks for is unknown, not its sibling's
        ("NVIDIA H100 NVL", None),
    ],
)
def test_known_cards_by_the_names_pytorch_reports(name, label):
    assert bench.make_card(name, "cuda:0", {})["known_as"] == label


def test_the_peak_table_is_dense_and_consistent():
    for _, label, (fp32, tf32, bf16, fp16, memory, pcie) in bench.CARDS:
        assert fp16 > fp32 > 0, f"{label}: tensor cores beat plain fp32"
        if bf16 is not None:
            assert bf16 == fp16 and tf32 <= bf16 / 2 + 1e-9, label
        assert memory > pcie > 0, label
    peaks = {
        row["key"]: row["peak"]
        for row in bench.make_card("NVIDIA H100 80GB HBM3", "cuda:0", {})["rows"]
    }
    assert peaks["bf16"] == pytest.approx(989.5), "dense, not the sparse 1,979"


def test_ratios_for_a_known_card():
    measured = {
        "bf16": 791.6,
        "fp16": 700.0,
        "d2d": 2847.5,
        "h2d_pageable": 20.0,
        "h2d_pinned": 52.0,
    }
    card = bench.make_card("NVIDIA H100 80GB HBM3", "cuda:0", measured, {"fp32": "not measured"})
    rows = {row["key"]: row for row in card["rows"]}
    assert card["gpu"] and card["known_as"] == "H100 SXM"
    assert rows["bf16"]["ratio"] == pytest.approx(0.8)
    assert rows["d2d"]["ratio"] == pytest.approx(0.85)
    assert rows["h2d_pinned"]["ratio"] == pytest.approx(52 / 64)
    assert (
        rows["fp32"]["value"] is None
        and rows["fp32"]["ratio"] is None
        and rows["fp32"]["peak"] == 67
    )
    assert rows["fp32"]["note"] == "not measured"
    text = bench.render(card)
    assert "known as H100 SXM" in text and "80%" in text and "2.6x as fast as pageable" in text
    json.dumps(card)  # plain data


def test_an_unknown_card_gets_numbers_without_ratios():
    card = bench.make_card("NVIDIA GeForce RTX 4090", "cuda:0", {"fp32": 80.0, "d2d": 900.0})
    assert card["known_as"] is None
    assert all(row["ratio"] is None and row["peak"] is None for row in card["rows"])
    assert {row["key"]: row["value"] for row in card["rows"]}["fp32"] == 80.0
    assert "no published peaks" in bench.render(card)


def test_a_cpu_never_gets_a_gpu_ratio():
    card = bench.make_card("NVIDIA H100 80GB HBM3", "cpu", {"fp32": 1.0})
    assert not card["gpu"] and card["known_as"] is None
    assert all(row["ratio"] is None for row in card["rows"])
    assert "NOT A GPU" in bench.render(card)


def test_command_line_json_on_the_cpu(capsys):
    assert cli.main(["bench", "--json", *QUICK]) == 0
    card = json.loads(capsys.readouterr().out)
    assert set(card) >= {"name", "device", "gpu", "known_as", "rows", "matmul_size", "torch"}
    assert card["device"] == "cpu" and card["gpu"] is False and card["matmul_size"] == 64
    assert [row["key"] for row in card["rows"]] == list(bench.ROWS)
    for row in card["rows"]:
        assert set(row) == {"key", "what", "value", "unit", "peak", "ratio", "note"}
        assert row["ratio"] is None and row["peak"] is None
    values = {row["key"]: row["value"] for row in card["rows"]}
    assert values["fp32"] > 0 and values["bf16"] > 0 and values["d2d"] > 0
    assert (
        values["tf32"] is None and values["h2d_pinned"] is None and values["h2d_pageable"] is None
    )
    assert all(row["note"] for row in card["rows"] if row["value"] is None), (
        "every missing number says why"
    )


def test_command_line_text_says_it_is_not_a_gpu(capsys):
    assert bench.main(QUICK) == 0
    out = capsys.readouterr().out
    assert "NOT A GPU" in out and "matmul fp32" in out and "TFLOP/s" in out


def test_usage_lists_bench_beside_doctor(capsys):
    assert cli.main(["--help"]) == 0
    out = capsys.readouterr().out
    assert "bench [--json]" in out and "doctor [--json]" in out


def test_a_missing_gpu_is_an_error_not_a_traceback(capsys):
    assert bench.main(["--device", "cuda:99"]) == 2
    err = capsys.readouterr().err
    assert "cuda:99" in err and "Traceback" not in err


@no_cuda
def test_strict_mode_refuses_to_bench_the_cpu(monkeypatch, capsys):
    monkeypatch.setenv("GPUCOURSE_REQUIRE_GPU", "1")
    assert bench.main(["--json"]) == 2
    assert "GPUCOURSE_REQUIRE_GPU" in capsys.readouterr().err


@pytest.mark.parametrize("modern", [True, False])
def test_tf32_switch_uses_the_current_api_and_restores_it(monkeypatch, modern):
    """PyTorch 2.9+: only `fp32_precision` (the legacy setter warns, and mixing is unsupported);
    older: `allow_tf32`."""

    class Matmul:  # torch.backends.cuda.matmul of either PyTorch
        pass

    matmul = Matmul()
    name, off, on = ("fp32_precision", "ieee", "tf32") if modern else ("allow_tf32", False, True)
    setattr(matmul, name, "none" if modern else False)
    monkeypatch.setattr(torch.backends.cuda, "matmul", matmul)
    with bench._tf32(True):
        assert getattr(matmul, name) == on
        with bench._tf32(False):
            assert getattr(matmul, name) == off
    assert getattr(matmul, name) == ("none" if modern else False), "set back afterwards"
    assert not hasattr(matmul, "allow_tf32" if modern else "fp32_precision"), "never the other API"
