"""gpucourse.transfer: sizes, copy timing, the bandwidth curve and its command line."""

from __future__ import annotations

import json
import math

import pytest
import torch

from gpucourse import DeviceError, transfer

no_cuda = pytest.mark.skipif(torch.cuda.is_available(), reason="checks the message shown where CUDA is missing")


@pytest.mark.parametrize(
    "text,expected",
    [("64MiB", 64 * 2**20), ("64M", 64 * 2**20), ("4 KB", 4096), ("1GiB", 2**30), ("512", 512), (4096, 4096),
     ("1.5KiB", 1536)],
)
def test_parse_size(text, expected):
    assert transfer.parse_size(text) == expected


@pytest.mark.parametrize("bad", ["12 parsecs", "MiB", "", "0", 0, "-4KiB"])
def test_parse_size_rejects_what_is_not_a_size(bad):
    with pytest.raises(ValueError, match="size|byte"):
        transfer.parse_size(bad)


def test_powers_of_two():
    assert transfer.powers_of_two("4KiB", "1MiB") == [4096, 16384, 65536, 262144, 1048576]
    assert transfer.powers_of_two(1, 8, step=1) == [1, 2, 4, 8]
    assert transfer.powers_of_two("1KiB", "3KiB", step=1) == [1024, 2048], "never beyond the largest size"
    with pytest.raises(ValueError, match="larger than"):
        transfer.powers_of_two("1MiB", "4KiB")


def test_format_bytes():
    assert transfer.format_bytes(512) == "512 B"
    assert transfer.format_bytes(1536) == "1.5 KiB"
    assert transfer.format_bytes(64 * 2**20) == "64 MiB"
    assert transfer.format_bytes(3 * 2**30) == "3 GiB"


def test_host_tensor_has_the_size_asked_for():
    tensor = transfer.host_tensor("3KiB")
    assert tensor.dtype == torch.uint8 and tensor.numel() == 3072 and tensor.device.type == "cpu"
    assert not tensor.is_pinned()
    assert int(tensor.min()) == 1, "the pages are touched before any timing"


def test_time_copy_on_cpu_returns_consistent_numbers():
    threads = torch.get_num_threads()
    result = transfer.time_copy("64KiB", "cpu", min_run_time=0.01)
    assert result.nbytes == 65536 and result.mode == "pageable" and result.device == "cpu"
    assert result.seconds > 0 and math.isfinite(result.seconds)
    assert result.gbps == pytest.approx(65536 / result.seconds / 1e9)
    assert result.as_dict()["gbps"] == pytest.approx(result.gbps)
    assert set(result.as_dict()) == {"nbytes", "mode", "non_blocking", "seconds", "device", "gbps"}
    assert "64 KiB pageable -> cpu (blocking)" in str(result)
    assert torch.get_num_threads() == threads, "time_copy must restore PyTorch's thread count"


def test_time_copy_rejects_unknown_mode():
    with pytest.raises(ValueError, match="pageable"):
        transfer.time_copy("4KiB", "cpu", mode="locked")


@no_cuda
def test_pinned_memory_without_cuda_says_why():
    assert not transfer.pinning_available()
    assert "needs CUDA" in transfer.why_no_pinning()
    with pytest.raises(transfer.PinnedMemoryError, match="needs CUDA.*pageable"):
        transfer.time_copy("4KiB", "cpu", mode="pinned")
    with pytest.raises(transfer.PinnedMemoryError, match="needs CUDA"):
        transfer.time_copy("4KiB", "cpu", mode="pin_then_copy")
    with pytest.raises(transfer.PinnedMemoryError, match="pinned=False"):
        transfer.host_tensor(16, pinned=True)


@no_cuda
def test_bandwidth_curve_skips_pinned_modes_without_cuda(capsys):
    sizes = [1024, 4096]
    curve = transfer.bandwidth_curve(sizes, "cpu", modes=("pageable", "pinned"), min_run_time=0.01, progress=False)
    assert list(curve) == ["pageable"], "a mode that cannot run is left out"
    assert len(curve["pageable"]) == len(sizes) and all(v > 0 for v in curve["pageable"])
    assert "Skipping pinned" in capsys.readouterr().out


def test_bandwidth_curve_rejects_unknown_modes():
    with pytest.raises(ValueError, match="unknown mode"):
        transfer.bandwidth_curve([1024], "cpu", modes=("pageable", "bogus"), progress=False)


def test_a_missing_gpu_index_is_a_clear_error():
    with pytest.raises(DeviceError, match="cuda:7"):
        transfer.time_copy("4KiB", "cuda:7")


def test_command_line_json(capsys):
    args = ["--json", "--device", "cpu", "--smallest", "1KiB", "--largest", "4KiB", "--modes", "pageable"]
    assert transfer.main(args) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["device"] == "cpu" and report["sizes"] == [1024, 4096]
    assert len(report["gbps"]["pageable"]) == 2


def test_command_line_reports_bad_input_without_a_traceback(capsys):
    assert transfer.main(["--device", "cuda:7"]) == 2
    assert transfer.main(["--largest", "lots"]) == 2
    err = capsys.readouterr().err
    assert "cuda:7" in err and "'lots' is not a size" in err and "Traceback" not in err


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_pinned_copies_run_on_a_gpu():
    assert transfer.pinning_available()
    assert transfer.host_tensor(1024, pinned=True).is_pinned()
    curve = transfer.bandwidth_curve([2**20], "cuda", modes=transfer.MODES, min_run_time=0.01, progress=False)
    assert list(curve) == list(transfer.MODES) and all(v[0] > 0 for v in curve.values())
    assert transfer.time_copy(2**20, "cuda", mode="pinned", non_blocking=True, min_run_time=0.01).non_blocking
