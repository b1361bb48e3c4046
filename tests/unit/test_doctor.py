"""gpucourse.doctor: every usual failure diagnosed on a faked environment, and never a crash."""

import json
import subprocess
import sys

import pytest

from gpucourse import doctor
from gpucourse.__main__ import main as cli

H100 = {
    "index": 0,
    "name": "NVIDIA H100 80GB HBM3",
    "memory_gib": 79.6,
    "compute_capability": "9.0",
}


def facts(**overrides):
    base = {
        "gpucourse": "0",
        "python": "3.11",
        "platform": "Linux",
        "colab": False,
        "cuda_visible_devices": None,
        "driver": {
            "found": True,
            "version": "580.65",
            "cuda": "13.0",
            "gpus": [H100],
            "error": None,
        },
        "torch": {
            "installed": True,
            "version": "2.14.1+cu130",
            "cuda": "13.0",
            "cudnn": 92400,
            "cuda_available": True,
            "devices": ["NVIDIA H100 80GB HBM3"],
            "error": None,
        },
        "tensorflow": {
            "installed": True,
            "version": "2.21.0",
            "is_cuda_build": True,
            "cuda": "12.5.1",
            "cudnn": "9",
            "gpus": 1,
            "error": None,
        },
        "dali": {"installed": True, "version": "2.4.0", "cuda": "12", "error": None},
        "nvidia": {"packages": {}, "clashes": {}},
    }
    for key, value in overrides.items():
        base[key] = {**base[key], **value} if isinstance(value, dict) else value
    return base


def levels(findings):
    return [f.level for f in findings]


def only_error(findings):
    errors = [f for f in findings if f.level == "error"]
    assert len(errors) == 1, findings
    return errors[0]


def test_a_healthy_gpu_machine():
    findings = doctor.diagnose(facts())
    assert "error" not in levels(findings)
    assert any("PyTorch sees 1 GPU" in f.problem for f in findings)


def test_no_driver_is_information_not_failure():
    findings = doctor.diagnose(
        facts(
            driver={"found": False, "gpus": [], "error": "NVML Shared Library Not Found"},
            torch={"cuda_available": False, "devices": []},
            tensorflow={"gpus": 0},
        )
    )
    assert "error" not in levels(findings)
    assert any(
        f.level == "info" and "No NVIDIA driver" in f.problem and "Colab" in f.fix for f in findings
    )


def test_cpu_only_torch_on_a_gpu_machine():
    error = only_error(
        doctor.diagnose(
            facts(
                torch={
                    "version": "2.14.1+cpu",
                    "cuda": None,
                    "cuda_available": False,
                    "devices": [],
                }
            )
        )
    )
    assert "CPU-only build" in error.problem and "pytorch.org" in error.fix


def test_driver_older_than_the_build():
    error = only_error(
        doctor.diagnose(
            facts(driver={"cuda": "12.2"}, torch={"cuda_available": False, "devices": []})
        )
    )
    assert (
        "12.2" in error.problem
        and "13.0" in error.problem
        and "Update the NVIDIA driver" in error.fix
    )


@pytest.mark.parametrize("torch_cuda", ["13.0", "12.8"])
def test_tensorflow_without_its_cuda_libraries(torch_cuda):
    """Beside PyTorch's CUDA 13 wheels, adding TensorFlow's CUDA 12 ones would overwrite cuDNN
    and NCCL: the GPU set."""
    error = only_error(doctor.diagnose(facts(tensorflow={"gpus": 0}, torch={"cuda": torch_cuda})))
    assert "CUDA libraries" in error.problem and "are missing" in error.problem
    if torch_cuda == "13.0":
        assert "make lab GPU=1" in error.fix and "and-cuda" not in error.fix
    else:
        assert "tensorflow[and-cuda]==2.21.0" in error.fix


@pytest.mark.parametrize("value", ["", "-1"])
def test_an_empty_cuda_visible_devices(value):
    findings = doctor.diagnose(
        facts(
            cuda_visible_devices=value,
            torch={"cuda_available": False, "devices": []},
            tensorflow={"gpus": 0},
        )
    )
    error = only_error(findings)
    assert "CUDA_VISIBLE_DEVICES" in error.problem and "unset" in error.fix.lower()


def test_a_framework_that_fails_to_import():
    error = only_error(doctor.diagnose(facts(tensorflow={"error": "ImportError: libcudnn.so.9"})))
    assert "fails to import" in error.problem and "--force-reinstall" in error.fix


def test_missing_optional_frameworks_are_information():
    findings = doctor.diagnose(facts(tensorflow={"installed": False}, dali={"installed": False}))
    assert "error" not in levels(findings)
    assert sum("not installed" in f.problem for f in findings) == 2


def test_collect_survives_a_broken_probe(monkeypatch):
    def explode():
        raise RuntimeError("boom")

    monkeypatch.setattr(doctor, "probe_driver", explode)
    monkeypatch.setattr(
        doctor,
        "probe_framework",
        lambda key: explode() if key == "tensorflow" else {"installed": False},
    )
    collected = doctor.collect()
    assert "boom" in collected["driver"]["error"] and "boom" in collected["tensorflow"]["error"]
    assert "NVIDIA driver: not found (RuntimeError: boom)" in doctor.render(
        collected, doctor.diagnose(collected)
    )


def test_a_torch_that_fails_to_import_is_reported(monkeypatch):
    monkeypatch.setitem(sys.modules, "torch", None)
    probed = doctor.probe_framework("torch")
    assert probed["installed"] and "import of torch halted" in probed["error"]


def test_render_has_every_section():
    text = doctor.render(facts(), doctor.diagnose(facts()))
    for needle in (
        "NVIDIA driver 580.65",
        "GPU 0: NVIDIA H100",
        "pinned set: ",
        "PyTorch 2.14.1+cu130",
        "built for CUDA 13.0",
        "TensorFlow 2.21.0",
        "DALI 2.4.0",
        "Diagnosis:",
    ):
        assert needle in text


@pytest.mark.slow
def test_the_json_report_here():
    """`--json` on this machine (the text report is `make doctor`'s, in test_entry_points): the
    exit status follows errors."""
    result = subprocess.run(
        [sys.executable, "-m", "gpucourse", "doctor", "--json"], capture_output=True, text=True
    )
    report = json.loads(result.stdout)
    assert set(report) == {"facts", "findings"} and report["facts"]["torch"]["installed"], report
    assert result.returncode == (1 if any(f["level"] == "error" for f in report["findings"]) else 0)


def test_cli_usage(capsys):
    assert cli([]) == 2 and "doctor" in capsys.readouterr().out
    assert cli(["nonsense"]) == 2


@pytest.mark.parametrize("value,words", [("1", "has 1 GPU(s)"), ("GPU-deadbeef", "matches none")])
def test_cuda_visible_devices_naming_a_gpu_that_does_not_exist(value, words):
    """The mistake lesson 01's Exercise 2 teaches: not "the driver is broken" but the variable,
    with the fix."""
    h100 = {**H100, "uuid": "GPU-5e1a2b3c-0000-1111-2222-333344445555"}
    findings = doctor.diagnose(
        facts(
            cuda_visible_devices=value,
            driver={"gpus": [h100]},
            torch={"cuda_available": False, "devices": []},
            tensorflow={"gpus": 0},
        )
    )
    error = only_error(findings)
    assert words in error.problem and "nvidia-smi -L" in error.fix


CU13_TORCH_WITH_TF_CUDA = {
    "packages": {
        "nvidia-cudnn-cu13": 13,
        "nvidia-nccl-cu13": 13,
        "nvidia-cublas": 13,
        "nvidia-cudnn-cu12": 12,
        "nvidia-nccl-cu12": 12,
        "nvidia-dali-cuda120": 12,
    }
}


@pytest.mark.parametrize(
    ("driver", "level"), [({}, "warning"), ({"found": False, "gpus": []}, "info")]
)
def test_two_cuda_majors_in_one_environment(driver, level):
    found = [
        f
        for f in doctor.diagnose(facts(nvidia=CU13_TORCH_WITH_TF_CUDA, driver=driver))
        if "two CUDA majors" in f.problem
    ]
    assert len(found) == 1 and found[0].level == level, found
    assert (
        "CUDA 12: nvidia-cudnn-cu12" in found[0].problem
        and "CUDA 13: nvidia-cublas" in found[0].problem
    )
    assert ("GPU=1" in found[0].fix) == (level == "warning")


def test_a_library_file_owned_by_two_packages():
    clash = {
        **CU13_TORCH_WITH_TF_CUDA,
        "clashes": {"nvidia/cudnn/lib/libcudnn.so.9": ["nvidia-cudnn-cu13", "nvidia-cudnn-cu12"]},
    }
    error = only_error(doctor.diagnose(facts(nvidia=clash)))
    assert (
        "nvidia/cudnn/lib/libcudnn.so.9 (nvidia-cudnn-cu13 and nvidia-cudnn-cu12)" in error.problem
    )
    assert "rm -rf .venv && make lab" in error.fix


@pytest.mark.parametrize(
    ("version", "cuda", "build", "need"),
    [
        ("575.57.08", "12.9", "13.0", "580"),
        ("520.61.05", "11.8", "12.8", "525.60.13"),
        ("525.53", "12.0", "12.8", "525.60.13"),
    ],
)
def test_a_driver_too_old_for_the_builds_cuda_major(version, cuda, build, need):
    error = only_error(
        doctor.diagnose(
            facts(
                driver={"version": version, "cuda": cuda},
                tensorflow={"installed": False},
                torch={"cuda": build, "cuda_available": False, "devices": []},
            )
        )
    )
    assert f"PyTorch (built for CUDA {build}, which needs driver {need} or newer)" in error.problem
    assert version in error.problem and f"Update the NVIDIA driver to {need}" in error.fix


def test_a_newer_minor_runs_through_minor_version_compatibility():
    findings = doctor.diagnose(
        facts(
            driver={"version": "535.183.01", "cuda": "12.2"},
            torch={"cuda": "12.8"},
            tensorflow={"cuda": "12.5.1"},
        )
    )
    assert "error" not in levels(findings)
    assert (
        sum("minor-version compatibility" in f.problem and f.level == "info" for f in findings) == 2
    )


def test_tensorflow_gpu_on_native_windows_means_wsl2():
    findings = doctor.diagnose(
        facts(
            platform="Windows-11-10.0.26100-SP0",
            tensorflow={"gpus": 0, "is_cuda_build": False},
            dali={"installed": False},
        )
    )
    (warning,) = [f for f in findings if "TensorFlow" in f.problem]
    assert warning.level == "warning" and "since 2.11" in warning.problem and "WSL2" in warning.fix


def test_cuda_major_of_installed_wheels():
    assert (
        doctor.cuda_major("nvidia-cudnn-cu12", []) == 12
        and doctor.cuda_major("nvidia-dali-cuda130", []) == 13
    )
    assert doctor.cuda_major("nvidia-cublas", ["nvidia/cu13/lib/libcublas.so.13"]) == 13
    assert doctor.cuda_major("nvidia-ml-py", ["pynvml.py"]) is None


def test_probe_nvidia_packages_reads_this_environment():
    probed = doctor.probe_nvidia_packages()
    if "nvidia-cudnn-cu13" not in probed["packages"]:
        pytest.skip("PyTorch's CUDA 13 wheels are not installed here")
    assert (
        probed["packages"]["nvidia-cudnn-cu13"] == 13
        and probed["packages"].get("nvidia-cuda-runtime") == 13
    )
    assert not probed["clashes"], "the CPU set has no file owned twice"


def test_probe_driver_reads_nvml(monkeypatch):
    """The driver probe on a faked NVML (nvidia-ml-py >= 12 decodes its strings): what a GPU
    machine reports."""
    import types

    fake = types.SimpleNamespace(
        nvmlInit=lambda: None,
        nvmlShutdown=lambda: None,
        nvmlSystemGetDriverVersion=lambda: "580.65.06",
        nvmlSystemGetCudaDriverVersion=lambda: 13000,
        nvmlDeviceGetCount=lambda: 1,
        nvmlDeviceGetHandleByIndex=lambda i: i,
        nvmlDeviceGetName=lambda h: "NVIDIA H100 80GB HBM3",
        nvmlDeviceGetCudaComputeCapability=lambda h: (9, 0),
        nvmlDeviceGetMemoryInfo=lambda h: types.SimpleNamespace(total=80 * 2**30),
        nvmlDeviceGetUUID=lambda h: "GPU-5e1a",
    )
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    assert doctor.probe_driver() == {
        "found": True,
        "version": "580.65.06",
        "cuda": "13.0",
        "error": None,
        "gpus": [
            {
                "index": 0,
                "name": "NVIDIA H100 80GB HBM3",
                "memory_gib": 80.0,
                "compute_capability": "9.0",
                "uuid": "GPU-5e1a",
            }
        ],
    }


# Colab's GPU runtime (googlecolab/backend-info, pip-freeze.gpu.txt of 2026-08-19): its nvidia-*
# wheels, all for CUDA 12
# but one, nvidia-nccl-cu13, which owns the same libnccl.so.2 as nvidia-nccl-cu12.
COLAB_NVIDIA = [
    "nvidia-cublas-cu12",
    "nvidia-cuda-cccl-cu12",
    "nvidia-cuda-cupti-cu12",
    "nvidia-cuda-nvcc-cu12",
    "nvidia-cuda-nvrtc-cu12",
    "nvidia-cuda-runtime-cu12",
    "nvidia-cudnn-cu12",
    "nvidia-cufft-cu12",
    "nvidia-cufile-cu12",
    "nvidia-curand-cu12",
    "nvidia-cusolver-cu12",
    "nvidia-cusparse-cu12",
    "nvidia-cusparselt-cu12",
    "nvidia-libnvcomp-cu12",
    "nvidia-nccl-cu12",
    "nvidia-nccl-cu13",
    "nvidia-nvimgcodec-cu12",
    "nvidia-nvjitlink-cu12",
    "nvidia-nvshmem-cu12",
    "nvidia-nvtx-cu12",
]
T4 = {
    "index": 0,
    "name": "Tesla T4",
    "memory_gib": 14.74,
    "compute_capability": "7.5",
    "uuid": "GPU-7e57",
}


def colab_facts():
    return facts(
        colab=True,
        platform="Linux-6.6.105+-x86_64-with-glibc2.35",
        python="3.13.0",
        driver={"version": "550.54.15", "cuda": "12.4", "gpus": [T4]},
        torch={"version": "2.11.0+cu128", "cuda": "12.8", "devices": ["Tesla T4"]},
        tensorflow={"version": "2.20.0", "cuda": "12.5.1"},
        dali={"installed": False},
        nvidia={
            "packages": {name: doctor.cuda_major(name, []) for name in COLAB_NVIDIA},
            "clashes": {"nvidia/nccl/lib/libnccl.so.2": ["nvidia-nccl-cu12", "nvidia-nccl-cu13"]},
        },
    )


def test_colab_runtime_as_shipped_is_no_error_and_gets_no_course_venv_fix():
    """Colab ships two NCCL wheels for two CUDA majors; the course's .venv fixes (make lab, rm
    -rf .venv) do not apply."""
    findings = doctor.diagnose(colab_facts())
    assert "error" not in levels(findings) and "warning" not in levels(findings), findings
    assert not [f for f in findings if "make lab" in f.fix or ".venv" in f.fix], findings
    shipped = [f for f in findings if "as Google ships it" in f.problem]
    assert levels(shipped) == ["info", "info"] and "libnccl.so.2" in shipped[1].problem, shipped
    assert any("Lesson 05's set-up cell" in f.fix for f in findings if "DALI" in f.problem)
    # the same packages in the course's own .venv
    off_colab = doctor.diagnose(colab_facts() | {"colab": False})
    assert "rm -rf .venv && make lab" in only_error(off_colab).fix


def test_colab_is_recognized_in_a_command_the_notebook_runs(monkeypatch):
    """`!python -m gpucourse doctor` runs in a new process without google.colab imported; Colab's
    variable reaches it."""
    monkeypatch.setattr(doctor, "probe_driver", lambda: {"found": False, "gpus": []})
    monkeypatch.setattr(doctor, "probe_framework", lambda key: {"installed": False})
    monkeypatch.delitem(sys.modules, "google.colab", raising=False)
    monkeypatch.delenv("COLAB_RELEASE_TAG", raising=False)
    monkeypatch.delenv("KAGGLE_KERNEL_RUN_TYPE", raising=False)
    assert not doctor.collect()["colab"]
    monkeypatch.setenv("COLAB_RELEASE_TAG", "release-colab-external_20260819-060048_RC00")
    assert doctor.collect()["colab"]
    # Kaggle's image is built on Colab's and sets it too
    monkeypatch.setenv("KAGGLE_KERNEL_RUN_TYPE", "Interactive")
    assert not doctor.collect()["colab"]


# the shape of torch 2.11.0+cu128's list
CU128_ARCH = ["sm_75", "sm_80", "sm_86", "sm_90", "sm_100", "sm_120"]


@pytest.mark.parametrize(
    "arch, capability, runs",
    [
        # an sm_86 cubin runs on 8.9 (a later minor)
        (CU128_ARCH, "9.0", True),
        (CU128_ARCH, "8.9", True),
        # Volta and Pascal: no kernels in this build
        (CU128_ARCH, "7.0", False),
        (CU128_ARCH, "6.0", False),
        # PTX is compiled for any later GPU
        (["sm_80"], "9.0", False),
        (["sm_80", "compute_80"], "9.0", True),
        (["sm_90a"], "9.0", True),
        ([], "6.0", True),  # an unknown list claims nothing
    ],
)
def test_runs_on_reads_the_builds_architectures(arch, capability, runs):
    assert doctor.runs_on(arch, capability) is runs


def test_a_gpu_the_pytorch_build_has_no_kernels_for():
    p100 = {
        "index": 0,
        "name": "Tesla P100-PCIE-16GB",
        "memory_gib": 15.9,
        "compute_capability": "6.0",
    }
    error = only_error(
        doctor.diagnose(
            facts(
                driver={"gpus": [p100], "cuda": "12.8", "version": "570.1"},
                torch={
                    "version": "2.11.0+cu128",
                    "cuda": "12.8",
                    "arch": CU128_ARCH,
                    "devices": [p100["name"]],
                },
            )
        )
    )
    assert (
        "Tesla P100-PCIE-16GB (compute capability 6.0)" in error.problem
        and "sm_75" in error.problem
    )
    assert "GPU=0" in error.fix and "Colab" in error.fix
    # the H100 runs them
    assert "error" not in levels(doctor.diagnose(facts(torch={"arch": CU128_ARCH})))
