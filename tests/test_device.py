"""gpucourse.device: the device choice, its messages, strict mode, and the facts."""

import pytest
import torch

import gpucourse
from gpucourse import device as dev


@pytest.fixture
def no_cuda(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.delenv("GPUCOURSE_REQUIRE_GPU", raising=False)


@pytest.fixture
def one_gpu(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda d=None: "Fake GPU")


def test_falls_back_to_cpu_and_says_why(no_cuda, capsys):
    assert gpucourse.choose_device() == torch.device("cpu")
    out = capsys.readouterr().out
    assert "No CUDA GPU" in out and "Falling back to the CPU" in out


def test_fallback_on_colab_says_how_to_get_a_gpu(no_cuda, monkeypatch, capsys):
    monkeypatch.setitem(__import__("sys").modules, "google.colab", object())
    gpucourse.choose_device()
    assert "Runtime > Change runtime type" in capsys.readouterr().out


@pytest.mark.parametrize("value", ["1", "true", "yes"])
def test_strict_mode_turns_the_fallback_into_an_error(no_cuda, monkeypatch, value):
    monkeypatch.setenv("GPUCOURSE_REQUIRE_GPU", value)
    with pytest.raises(gpucourse.GPURequiredError, match="GPUCOURSE_REQUIRE_GPU"):
        gpucourse.choose_device()


def test_strict_mode_still_allows_an_explicit_cpu(no_cuda, monkeypatch):
    monkeypatch.setenv("GPUCOURSE_REQUIRE_GPU", "1")
    assert gpucourse.choose_device("cpu", verbose=False) == torch.device("cpu")


def test_takes_the_gpu_when_there_is_one(one_gpu, capsys):
    assert gpucourse.choose_device() == torch.device("cuda", 0)
    assert "Fake GPU" in capsys.readouterr().out


@pytest.mark.parametrize("bad", ["gpu", "cuda:x", "", "nvidia"])
def test_a_wrong_device_string_is_explained(bad):
    with pytest.raises(gpucourse.DeviceError, match="Use 'cuda'"):
        gpucourse.choose_device(bad)


def test_a_gpu_index_that_does_not_exist_is_explained(one_gpu):
    with pytest.raises(gpucourse.DeviceError, match=r"1 CUDA device\(s\): cuda:0"):
        gpucourse.choose_device("cuda:7")


def test_asking_for_cuda_without_one_is_explained(no_cuda):
    with pytest.raises(gpucourse.DeviceError, match="choose_device\\(\\) with no argument"):
        gpucourse.choose_device("cuda")


@pytest.mark.parametrize("other", ["mps", "xpu"])
def test_another_accelerator_this_machine_lacks_is_explained(monkeypatch, other):
    monkeypatch.setattr(torch.accelerator, "current_accelerator", lambda check_available=False: None)
    with pytest.raises(gpucourse.DeviceError, match=f"no usable '{other}' device"):
        gpucourse.choose_device(other)


def test_meta_and_cpu_are_accepted(capsys):
    assert gpucourse.choose_device("meta").type == "meta"
    assert gpucourse.choose_device("cpu", verbose=False).type == "cpu"


@pytest.mark.parametrize(
    "cvd,expected", [("", "hides every GPU"), ("-1", "hides every GPU"), (None, "finds no NVIDIA GPU")]
)
def test_why_no_cuda_names_the_cause(monkeypatch, cvd, expected):
    monkeypatch.setattr(torch.version, "cuda", "13.0")
    if cvd is None:
        monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    else:
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", cvd)
    assert expected in dev.why_no_cuda()


def test_why_no_cuda_spots_a_cpu_only_build(monkeypatch):
    monkeypatch.setattr(torch.version, "cuda", None)
    assert "CPU-only build" in dev.why_no_cuda()


def test_cpu_facts():
    facts = gpucourse.device_facts("cpu")
    assert facts.device == "cpu" and facts.compute_capability is None
    assert facts.processors >= 1 and not facts.tensor_cores and not facts.fp8
    assert "processors" in str(facts) and facts.as_dict()["device"] == "cpu"


class _Props:
    def __init__(self, name, major, minor):
        self.name, self.major, self.minor = name, major, minor
        self.total_memory, self.multi_processor_count = 16 * 2**30, 40


@pytest.mark.parametrize(
    "name,cc,tensor_cores,bf16,fp8",
    [("Tesla T4", (7, 5), True, False, False), ("NVIDIA A100", (8, 0), True, True, False),
     ("NVIDIA L4", (8, 9), True, True, True), ("NVIDIA H100", (9, 0), True, True, True),
     ("Tesla P100", (6, 0), False, False, False)],
)
def test_gpu_facts_follow_the_compute_capability(monkeypatch, name, cc, tensor_cores, bf16, fp8):
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda d: _Props(name, *cc))
    facts = gpucourse.device_facts(torch.device("cuda", 0))
    assert (facts.name, facts.compute_capability) == (name, cc)
    assert (facts.tensor_cores, facts.bf16, facts.tf32, facts.fp8) == (tensor_cores, bf16, bf16, fp8)
    assert facts.total_memory_gib == 16.0 and facts.processors == 40
