"""gpucourse.device: the device choice, its messages, strict mode, and the facts."""

import types

import pytest
import torch

import gpucourse
from gpucourse import device as dev


@pytest.fixture
def no_cuda(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.delenv("GPUCOURSE_REQUIRE_GPU", raising=False)


# torch.cuda.get_arch_list() of PyTorch's builds (docs/pytorch-cuda-builds.toml); PyPI's 2.14.1
# (CUDA 13.0) prints the same list as 2.11.0+cu128
CU126_ARCH = ["sm_50", "sm_60", "sm_70", "sm_75", "sm_80", "sm_86", "sm_90"]
CU128_ARCH = ["sm_75", "sm_80", "sm_86", "sm_90", "sm_100", "sm_120"]


def fake_gpu(monkeypatch, capability=(9, 0), arch=("sm_90",), name="Fake GPU"):
    """One visible GPU of ``capability``, and a PyTorch built for ``arch``."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda d=None: name)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda d=None: capability)
    monkeypatch.setattr(torch.cuda, "get_arch_list", lambda: list(arch))
    monkeypatch.delenv("GPUCOURSE_REQUIRE_GPU", raising=False)


@pytest.fixture
def one_gpu(monkeypatch):
    fake_gpu(monkeypatch)


@pytest.fixture
def pascal(monkeypatch):
    """A GTX 1080 (compute capability 6.1) under PyPI's CUDA 13.0 build: CUDA starts, and no
    kernel runs."""
    fake_gpu(monkeypatch, (6, 1), CU128_ARCH, "NVIDIA GeForce GTX 1080")


def test_falls_back_to_cpu_and_says_why(no_cuda, capsys):
    assert gpucourse.choose_device() == torch.device("cpu")
    out = capsys.readouterr().out
    assert "No usable CUDA GPU" in out and "Falling back to the CPU" in out


def test_fallback_on_colab_says_how_to_get_a_gpu(no_cuda, monkeypatch, capsys):
    monkeypatch.delenv("KAGGLE_KERNEL_RUN_TYPE", raising=False)
    monkeypatch.setitem(__import__("sys").modules, "google.colab", object())
    gpucourse.choose_device()
    assert "Runtime > Change runtime type" in capsys.readouterr().out


@pytest.mark.parametrize(
    "module, variables, colab",
    [
        (False, {}, False),
        (True, {}, True),  # Colab's kernel
        (False, {"COLAB_RELEASE_TAG": "release-colab_20260819"}, True),  # `!python -m ...` there
        # Kaggle's image is built on Colab's: its variable, and Kaggle's own
        (False, {"COLAB_RELEASE_TAG": "x", "KAGGLE_KERNEL_RUN_TYPE": "Interactive"}, False),
    ],
)
def test_on_colab_is_the_one_colab_test(monkeypatch, module, variables, colab):
    """choose_device, device_facts and the doctor all ask gpucourse.device.on_colab()."""
    from gpucourse import device

    monkeypatch.delitem(__import__("sys").modules, "google.colab", raising=False)
    for name in ("COLAB_RELEASE_TAG", "KAGGLE_KERNEL_RUN_TYPE"):
        monkeypatch.delenv(name, raising=False)
    if module:
        monkeypatch.setitem(__import__("sys").modules, "google.colab", object())
    for name, value in variables.items():
        monkeypatch.setenv(name, value)
    assert device.on_colab() is colab
    assert device.device_facts("cpu").colab is colab


@pytest.mark.parametrize("value", ["1", "true", "yes"])
def test_strict_mode_turns_the_fallback_into_an_error(no_cuda, monkeypatch, value):
    monkeypatch.setenv("GPUCOURSE_REQUIRE_GPU", value)
    with pytest.raises(RuntimeError, match="GPUCOURSE_REQUIRE_GPU=1 forbids the CPU fallback"):
        gpucourse.choose_device()


def test_strict_mode_still_allows_an_explicit_cpu(no_cuda, monkeypatch):
    monkeypatch.setenv("GPUCOURSE_REQUIRE_GPU", "1")
    assert gpucourse.choose_device("cpu", verbose=False) == torch.device("cpu")


def test_takes_the_gpu_when_there_is_one(one_gpu, capsys):
    assert gpucourse.choose_device() == torch.device("cuda", 0)
    assert "Fake GPU" in capsys.readouterr().out


@pytest.mark.parametrize(
    "capability, arch",
    [
        ((9, 0), ["sm_90"]),
        ((8, 6), ["sm_80"]),  # an sm_80 cubin runs on 8.6, a later minor of its major
        ((8, 9), CU128_ARCH),  # an L4 on the GPU set's build (sm_86)
        ((12, 1), ["sm_90", "compute_90"]),  # only PTX, which the driver compiles for later GPUs
        ((6, 1), CU126_ARCH),  # Pascal on PyTorch's CUDA 12.6 build (sm_60)
        ((5, 2), CU126_ARCH),  # Maxwell (sm_50)
    ],
)
def test_a_gpu_the_build_has_kernels_for_is_kept(monkeypatch, capsys, capability, arch):
    fake_gpu(monkeypatch, capability, arch)
    monkeypatch.setenv("GPUCOURSE_REQUIRE_GPU", "1")
    assert gpucourse.choose_device() == torch.device("cuda", 0)
    assert gpucourse.choose_device("cuda:0", verbose=False) == torch.device("cuda", 0)
    assert capsys.readouterr().out == "Using cuda:0: Fake GPU.\n"


def test_a_gpu_without_kernels_in_this_build_falls_back_with_the_reason(pascal, capsys):
    """PyPI's torch sees a GTX 1080 but has no kernels for it: its first kernel would fail with
    "no kernel image is available"."""
    assert gpucourse.choose_device() == torch.device("cpu")
    out = capsys.readouterr().out
    assert "No usable CUDA GPU: this PyTorch" in out
    assert "NVIDIA GeForce GTX 1080 (sm_61)" in out
    assert "built for sm_75 sm_80 sm_86 sm_90 sm_100 sm_120" in out
    assert "Falling back to the CPU" in out
    # what to do: which builds cover it, and no advice to install what has just failed
    assert "CUDA 12.6 builds" in out and "Pascal" in out and "Colab's GPUs" in out
    assert "GPU=0" not in out
    assert gpucourse.choose_device(verbose=False) == torch.device("cpu")
    assert capsys.readouterr().out == "", "verbose=False is quiet"
    assert gpucourse.device_facts().device == "cpu"


@pytest.mark.parametrize("want", ["cuda", "cuda:0"])
def test_asking_for_a_gpu_without_kernels_is_explained(pascal, want):
    with pytest.raises(gpucourse.DeviceError) as raised:
        gpucourse.choose_device(want)
    message = str(raised.value)
    assert message.startswith(f"{want!r} asked for, but this PyTorch")
    assert "GTX 1080 (sm_61)" in message and "CUDA 12.6 builds" in message
    assert "choose_device() with no argument falls back to the CPU" in message


def test_strict_mode_refuses_a_gpu_without_kernels(pascal, monkeypatch):
    monkeypatch.setenv("GPUCOURSE_REQUIRE_GPU", "1")
    with pytest.raises(RuntimeError, match=r"forbids the CPU fallback: .*GTX 1080 \(sm_61\)"):
        gpucourse.choose_device()


@pytest.mark.parametrize(
    "arch, capability, runs",
    [
        (CU128_ARCH, (9, 0), True),
        (CU128_ARCH, (8, 9), True),  # an sm_86 cubin runs on 8.9 (a later minor)
        (CU128_ARCH, (12, 1), True),  # sm_120 on 12.1
        (CU128_ARCH, (7, 0), False),  # Volta, Pascal and Maxwell: no kernels in this build
        (CU128_ARCH, (6, 0), False),
        (CU128_ARCH, (6, 1), False),
        (CU128_ARCH + ["compute_120"], (6, 1), False),  # PTX for 12.0 runs on none before it
        (CU126_ARCH, (7, 0), True),
        (CU126_ARCH, (6, 1), True),  # sm_60's cubin on 6.1
        (CU126_ARCH, (5, 2), True),
        (CU126_ARCH, (10, 0), False),  # Blackwell: no sm_100, and sm_90 is not its major
        (["sm_80"], (9, 0), False),
        (["sm_80", "compute_80"], (9, 0), True),  # PTX is compiled for any later GPU
        (["compute_90"], (8, 6), False),  # but never for an earlier one
        (["sm_90a"], (9, 0), True),
        ([], (6, 0), True),  # an unknown list claims nothing
    ],
)
def test_runs_on_reads_the_builds_architectures(arch, capability, runs):
    assert dev.runs_on(arch, capability) is runs


@pytest.mark.parametrize("bad", ["gpu", "cuda:x", "", "nvidia", "mps", "xpu"])
def test_a_wrong_device_string_is_explained(bad):
    """A typo, or another vendor's accelerator: the course runs on 'cuda', 'cpu' and 'meta'."""
    with pytest.raises(gpucourse.DeviceError, match="use 'cuda'"):
        gpucourse.choose_device(bad)


def test_a_gpu_index_that_does_not_exist_is_explained(one_gpu):
    with pytest.raises(gpucourse.DeviceError, match=r"shows 1 CUDA device\(s\) .*: cuda:0\."):
        gpucourse.choose_device("cuda:7")


def test_asking_for_cuda_without_one_is_explained(no_cuda):
    with pytest.raises(gpucourse.DeviceError, match="choose_device\\(\\) with no argument"):
        gpucourse.choose_device("cuda")


def test_meta_and_cpu_are_accepted(capsys):
    assert gpucourse.choose_device("meta").type == "meta"
    assert gpucourse.choose_device("cpu", verbose=False).type == "cpu"


def driver_with(monkeypatch, *uuids):
    """Fake what the NVML probe reads: the driver's GPUs."""
    monkeypatch.setattr(dev, "probe_driver", lambda: {"gpus": [{"uuid": uuid} for uuid in uuids]})


@pytest.mark.parametrize(
    "cvd,expected",
    [("", "hides every GPU"), ("-1", "hides every GPU"), (None, "finds no NVIDIA GPU")],
)
def test_why_no_cuda_names_the_cause(monkeypatch, cvd, expected):
    monkeypatch.setattr(torch.version, "cuda", "13.0")
    driver_with(monkeypatch)
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
    assert "processors" in str(facts) and "compute_capability  None" in str(facts)


class _Props:
    def __init__(self, name, major, minor):
        self.name, self.major, self.minor = name, major, minor
        self.total_memory, self.multi_processor_count = 16 * 2**30, 40


@pytest.mark.parametrize(
    "name,cc,tensor_cores,bf16,fp8",
    [
        ("Tesla T4", (7, 5), True, False, False),
        ("NVIDIA A100", (8, 0), True, True, False),
        ("NVIDIA L4", (8, 9), True, True, True),
        ("NVIDIA H100", (9, 0), True, True, True),
        ("Tesla P100", (6, 0), False, False, False),
    ],
)
def test_gpu_facts_follow_the_compute_capability(monkeypatch, name, cc, tensor_cores, bf16, fp8):
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda d: _Props(name, *cc))
    facts = gpucourse.device_facts(torch.device("cuda", 0))
    assert (facts.name, facts.compute_capability) == (name, cc)
    assert (facts.tensor_cores, facts.bf16, facts.tf32, facts.fp8) == (
        tensor_cores,
        bf16,
        bf16,
        fp8,
    )
    assert facts.total_memory_gib == 16.0 and facts.processors == 40


def test_workload_cpu_gpu_and_grading_sizes(monkeypatch):
    monkeypatch.delenv("NBGRADER_EXECUTION", raising=False)
    assert gpucourse.workload(torch.device("cpu"), cpu=1, gpu=100) == 1
    assert gpucourse.workload("cuda:1", cpu=1, gpu=100) == 100, (
        "no small_gpu: every GPU gets the GPU size"
    )
    monkeypatch.setenv("NBGRADER_EXECUTION", "autograde")
    assert gpucourse.is_grading()
    assert gpucourse.workload("cuda", cpu=10, gpu=100, grading=2) == 2
    assert gpucourse.workload("cuda", cpu=10, gpu=100) == 10, (
        "without a grading size, grading uses the CPU size"
    )


@pytest.mark.parametrize("total_gib,expected", [(79.6, 1024), (14.7, 1024), (7.6, 256), (3.8, 256)])
def test_workload_shrinks_on_a_small_gpu(monkeypatch, total_gib, expected):
    """The GPU size is meant for a 16 GB card (a T4 reports 14.7 GiB); an 8 GB card gets
    small_gpu."""
    monkeypatch.delenv("NBGRADER_EXECUTION", raising=False)
    seen = []

    def properties(device):
        seen.append(device)
        return types.SimpleNamespace(total_memory=int(total_gib * 2**30))

    monkeypatch.setattr(torch.cuda, "get_device_properties", properties)
    assert gpucourse.workload(torch.device("cuda", 1), cpu=32, gpu=1024, small_gpu=256) == expected
    assert seen == [torch.device("cuda", 1)], "the memory of the GPU asked about"


@pytest.mark.parametrize(
    "visible,problem",
    [
        (None, None),
        ("0", None),
        ("1,0", None),
        ("GPU-5e1", None),  # a unique UUID prefix is enough
        ("", "hides every GPU"),
        ("-1", "hides every GPU"),
        ("2", "has 2 GPU(s)"),
        ("2,0", "has 2 GPU(s)"),  # the list ends at the first GPU that does not exist
        ("GPU-0000", "matches none"),
        ("GPU-", "is ambiguous"),
        ("0,0", "names a GPU twice"),
        ("MIG-1234", None),  # MIG instances are not checked against whole GPUs
    ],
)
def test_visible_devices_that_name_no_existing_gpu(visible, problem):
    found = dev.visible_devices_problem(visible, ["GPU-5e1a-11", "GPU-9b2c-22"])
    assert (found is None) if problem is None else (problem in found), found


def test_why_no_cuda_names_a_missing_gpu_index(monkeypatch):
    monkeypatch.setattr(torch.version, "cuda", "13.0")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")
    driver_with(monkeypatch, "GPU-only-one")
    assert "has 1 GPU(s)" in dev.why_no_cuda()
    driver_with(monkeypatch)  # no driver: the index cannot be the reason
    assert "finds no NVIDIA GPU" in dev.why_no_cuda()


def test_why_no_pinning_without_cuda(no_cuda):
    assert "needs CUDA" in dev.why_no_pinning()


@pytest.mark.parametrize(
    ("capability", "expected"),
    [
        (None, (torch.bfloat16, False)),
        ((6, 1), (torch.float32, False)),
        ((7, 0), (torch.float16, True)),
        ((7, 5), (torch.float16, True)),
        ((8, 0), (torch.bfloat16, False)),
        ((9, 0), (torch.bfloat16, False)),
        ((12, 0), (torch.bfloat16, False)),
    ],
)
def test_amp_dtype_follows_the_compute_capability(capability, expected):
    import dataclasses

    facts = dataclasses.replace(dev.device_facts("cpu"), compute_capability=capability)
    assert dev.amp_dtype(facts) == expected
    assert gpucourse.amp_dtype(facts) == expected
