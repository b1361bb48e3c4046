"""gpucourse.doctor (probes, checks, report): every usual failure diagnosed on a faked environment,
and never a crash.

Tests assert the findings' stable codes; one golden-text test keeps the wording honest.
"""

import json
import sys
import types

import pytest

from gpucourse import doctor
from gpucourse.__main__ import main as cli

H100 = {
    "index": 0,
    "name": "NVIDIA H100 80GB HBM3",
    "memory_gib": 79.6,
    "compute_capability": "9.0",
}
NO_TORCH_GPU = {"cuda_available": False, "devices": []}


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
        "shm": {"path": "/dev/shm", "total_mib": 32000},
    }
    for key, value in overrides.items():
        base[key] = {**base[key], **value} if isinstance(value, dict) else value
    return base


def codes(findings, level=None):
    return [f.code for f in findings if level is None or f.level == level]


def levels(findings):
    return [f.level for f in findings]


def only_error(findings):
    errors = [f for f in findings if f.level == "error"]
    assert len(errors) == 1, findings
    return errors[0]


def test_a_healthy_gpu_machine():
    findings = doctor.diagnose(facts())
    assert codes(findings) == ["torch_sees_gpus"] and levels(findings) == ["ok"]


def test_no_driver_is_information_not_failure():
    findings = doctor.diagnose(
        facts(
            driver={"found": False, "gpus": [], "error": "NVML Shared Library Not Found"},
            torch=NO_TORCH_GPU,
            tensorflow={"gpus": 0},
        )
    )
    assert codes(findings) == ["no_driver"] and levels(findings) == ["info"]


def test_a_driver_that_lists_no_gpu():
    findings = doctor.diagnose(facts(driver={"gpus": []}, torch=NO_TORCH_GPU))
    assert codes(findings) == ["no_gpu_listed"] and levels(findings) == ["warning"]


def test_cpu_only_torch_on_a_gpu_machine():
    torch = {"version": "2.14.1+cpu", "cuda": None, **NO_TORCH_GPU}
    assert only_error(doctor.diagnose(facts(torch=torch))).code == "cpu_only_torch"


def test_driver_older_than_the_build():
    error = only_error(doctor.diagnose(facts(driver={"cuda": "12.2"}, torch=NO_TORCH_GPU)))
    assert error.code == "driver_too_old" and "12.2" in error.problem and "13.0" in error.problem


@pytest.mark.parametrize("torch_cuda", ["13.0", "12.8"])
def test_tensorflow_without_its_cuda_libraries(torch_cuda):
    """Beside PyTorch's CUDA 13 wheels, adding TensorFlow's CUDA 12 ones would overwrite cuDNN and
    NCCL: the GPU set."""
    error = only_error(doctor.diagnose(facts(tensorflow={"gpus": 0}, torch={"cuda": torch_cuda})))
    assert error.code == "tf_without_cuda"
    if torch_cuda == "13.0":
        assert error.fix == doctor.GPU_SET_FIX
    else:
        assert "tensorflow[and-cuda]==2.21.0" in error.fix


def test_a_cpu_only_tensorflow_on_a_gpu_machine():
    findings = doctor.diagnose(facts(tensorflow={"gpus": 0, "is_cuda_build": False}))
    assert only_error(findings).code == "tf_cpu_only_build"


@pytest.mark.parametrize("value", ["", "-1"])
def test_an_empty_cuda_visible_devices(value):
    findings = doctor.diagnose(
        facts(cuda_visible_devices=value, torch=NO_TORCH_GPU, tensorflow={"gpus": 0})
    )
    assert only_error(findings).code == "empty_visible_devices"


@pytest.mark.parametrize("value,words", [("1", "has 1 GPU(s)"), ("GPU-deadbeef", "matches none")])
def test_cuda_visible_devices_naming_a_gpu_that_does_not_exist(value, words):
    """The mistake lesson 01's Exercise 2 teaches: not "the driver is broken" but the variable."""
    h100 = {**H100, "uuid": "GPU-5e1a2b3c-0000-1111-2222-333344445555"}
    findings = doctor.diagnose(
        facts(
            cuda_visible_devices=value,
            driver={"gpus": [h100]},
            torch=NO_TORCH_GPU,
            tensorflow={"gpus": 0},
        )
    )
    error = only_error(findings)
    assert error.code == "visible_devices_hide_gpus" and words in error.problem


def test_a_framework_that_fails_to_import():
    findings = doctor.diagnose(facts(tensorflow={"error": "ImportError: libcudnn.so.9"}))
    assert only_error(findings).code == "framework_import_error"


def test_missing_optional_frameworks_are_information():
    findings = doctor.diagnose(facts(tensorflow={"installed": False}, dali={"installed": False}))
    assert codes(findings, "info") == ["framework_missing"] * 2
    assert "error" not in levels(findings)


@pytest.mark.parametrize("total_mib, warned", [(64, True), (1023, True), (1024, False)])
def test_a_small_dev_shm(total_mib, warned):
    """A container's 64 MB /dev/shm kills DataLoader and DALI workers with a bus error."""
    findings = doctor.diagnose(facts(shm={"total_mib": total_mib}))
    assert ("small_dev_shm" in codes(findings, "warning")) is warned
    if warned:
        (finding,) = [f for f in findings if f.code == "small_dev_shm"]
        assert "--shm-size" in finding.fix and "--ipc=host" in finding.fix
        assert "num_workers=0" in finding.fix


def test_no_dev_shm_reading_claims_nothing():
    assert "small_dev_shm" not in codes(doctor.diagnose(facts(shm=None)))


def test_probe_shm_reads_statvfs(monkeypatch):
    """64 MiB as Docker mounts it by default; no /dev/shm (macOS, Windows) is no reading."""
    docker = types.SimpleNamespace(f_frsize=4096, f_blocks=16384)
    monkeypatch.setattr(doctor.probes.os, "statvfs", lambda path: docker, raising=False)
    assert doctor.probe_shm() == {"path": "/dev/shm", "total_mib": 64}

    def missing(path):
        raise FileNotFoundError(path)

    monkeypatch.setattr(doctor.probes.os, "statvfs", missing, raising=False)
    assert doctor.probe_shm() is None


def test_collect_survives_a_broken_probe(monkeypatch):
    def explode():
        raise RuntimeError("boom")

    monkeypatch.setattr(doctor.probes, "probe_driver", explode)
    monkeypatch.setattr(
        doctor.probes,
        "probe_framework",
        lambda key: explode() if key == "tensorflow" else {"installed": False},
    )
    collected = doctor.collect()
    assert "boom" in collected["driver"]["error"] and "boom" in collected["tensorflow"]["error"]
    report = doctor.render(collected, doctor.diagnose(collected))
    assert "NVIDIA driver: not found (RuntimeError: boom)" in report


def test_a_torch_that_fails_to_import_is_reported(monkeypatch):
    monkeypatch.setitem(sys.modules, "torch", None)
    probed = doctor.probe_framework("torch")
    assert probed["installed"] and "import of torch halted" in probed["error"]


GOLDEN = """\
gpucourse 0.2.0 environment report: Python 3.12.3 on Linux-6.8.0-x86_64-with-glibc2.39, \
CUDA_VISIBLE_DEVICES unset, pinned set: cpu
  NVIDIA driver 570.124.06, supports CUDA up to 12.8
    GPU 0: NVIDIA L4, 22.03 GiB, compute capability 8.9
  PyTorch 2.14.1+cpu, CPU-only build, sees 0 GPU(s)
  TensorFlow 2.21.0, built for CUDA 12.5.1, cuDNN 9, sees 0 GPU(s)
  DALI: not installed
  shared memory /dev/shm: 64 MiB
Diagnosis:
  [info] DALI is not installed: its cells are skipped.
      fix: `make lab` installs the course environment.
  [warning] /dev/shm holds only 64 MiB (Docker gives a container 64 unless told otherwise): \
DataLoader workers (num_workers > 0, lessons 03 and 05) hand their batches over through it, and \
one that does not fit kills the worker with a bus error.
      fix: Start the container with `--ipc=host` or `--shm-size=2g` or more (`docker run`, \
`podman run`), or set num_workers=0 in the loader cells.
  [error] PyTorch 2.14.1+cpu is a CPU-only build, but the driver sees 1 GPU(s).
      fix: Install a build for CUDA 12.8 or older with the pip command at \
https://pytorch.org/get-started/locally/.
  [error] TensorFlow 2.21.0 sees no GPU: its CUDA libraries (nvidia-cudnn-cu12 and the other \
CUDA 12 wheels) are missing.
      fix: `pip install 'tensorflow[and-cuda]==2.21.0'` adds them (Linux, WSL2)."""


def test_the_whole_report_for_one_machine():
    """The golden text: a container on an L4 with the CPU set's PyTorch and a 64 MB /dev/shm."""
    l4 = {"index": 0, "name": "NVIDIA L4", "memory_gib": 22.03, "compute_capability": "8.9"}
    machine = facts(
        gpucourse="0.2.0",
        python="3.12.3",
        platform="Linux-6.8.0-x86_64-with-glibc2.39",
        course_set="cpu",
        driver={"version": "570.124.06", "cuda": "12.8", "gpus": [l4]},
        torch={"version": "2.14.1+cpu", "cuda": None, "cudnn": None, **NO_TORCH_GPU},
        tensorflow={"gpus": 0},
        dali={"installed": False},
        shm={"total_mib": 64},
    )
    assert doctor.render(machine, doctor.diagnose(machine)) == GOLDEN


def test_json_carries_the_codes(monkeypatch, capsys):
    machine = facts(torch={"version": "2.14.1+cpu", "cuda": None, **NO_TORCH_GPU})
    monkeypatch.setattr(doctor.report, "collect", lambda: machine)
    assert doctor.main(["--json"]) == 1
    report = json.loads(capsys.readouterr().out)
    assert [f["code"] for f in report["findings"]] == ["cpu_only_torch"]
    assert set(report["findings"][0]) == {"code", "level", "problem", "fix"}


def test_cli_usage(capsys):
    assert cli([]) == 2 and "doctor" in capsys.readouterr().out
    assert cli(["nonsense"]) == 2


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
    ("driver", "level"),
    [({}, "warning"), ({"found": False, "gpus": []}, "info")],
)
def test_two_cuda_majors_in_one_environment(driver, level):
    findings = doctor.diagnose(facts(nvidia=CU13_TORCH_WITH_TF_CUDA, driver=driver))
    found = [f for f in findings if f.code == "two_cuda_majors"]
    assert len(found) == 1 and found[0].level == level, found
    assert "CUDA 12: nvidia-cudnn-cu12" in found[0].problem
    assert "CUDA 13: nvidia-cublas" in found[0].problem
    assert (found[0].fix == doctor.GPU_SET_FIX) == (level == "warning")


def test_a_library_file_owned_by_two_packages():
    clash = {
        **CU13_TORCH_WITH_TF_CUDA,
        "clashes": {"nvidia/cudnn/lib/libcudnn.so.9": ["nvidia-cudnn-cu13", "nvidia-cudnn-cu12"]},
    }
    error = only_error(doctor.diagnose(facts(nvidia=clash)))
    assert error.code == "library_file_clash"
    assert (
        "nvidia/cudnn/lib/libcudnn.so.9 (nvidia-cudnn-cu13 and nvidia-cudnn-cu12)" in error.problem
    )


@pytest.mark.parametrize(
    ("version", "cuda", "build", "need"),
    [
        ("575.57.08", "12.9", "13.0", "580"),
        ("520.61.05", "11.8", "12.8", "525.60.13"),
        ("525.53", "12.0", "12.8", "525.60.13"),
    ],
)
def test_a_driver_too_old_for_the_builds_cuda_major(version, cuda, build, need):
    machine = facts(
        driver={"version": version, "cuda": cuda},
        tensorflow={"installed": False},
        torch={"cuda": build, **NO_TORCH_GPU},
    )
    error = only_error(doctor.diagnose(machine))
    assert error.code == "driver_too_old"
    assert f"PyTorch (built for CUDA {build}, which needs driver {need} or newer)" in error.problem
    assert version in error.problem and f"driver to {need} or newer" in error.fix


def test_a_newer_minor_runs_through_minor_version_compatibility():
    findings = doctor.diagnose(
        facts(
            driver={"version": "535.183.01", "cuda": "12.2"},
            torch={"cuda": "12.8"},
            tensorflow={"cuda": "12.5.1"},
        )
    )
    assert "error" not in levels(findings)
    assert codes(findings, "info") == ["minor_version_compat"] * 2


def test_tensorflow_gpu_on_native_windows_means_wsl2():
    findings = doctor.diagnose(
        facts(
            platform="Windows-11-10.0.26100-SP0",
            tensorflow={"gpus": 0, "is_cuda_build": False},
            dali={"installed": False},
        )
    )
    assert "tf_on_native_windows" in codes(findings, "warning")
    assert "error" not in levels(findings)


@pytest.mark.parametrize(
    "name, version, files, major",
    [
        ("nvidia-cudnn-cu12", "9.19.0.56", [], 12),
        ("nvidia_nccl_cu13", "", [], 13),
        ("nvidia-dali-cuda120", "2.4.0", [], 12),
        ("nvidia-dali-cuda130", "", [], 13),
        ("torch", "2.11.0+cu128", [], 12),
        ("torch", "2.14.1", [], None),
        # CUDA 13's toolkit wheels dropped the suffix; their versions are the library's own
        ("nvidia-cublas", "13.1.1.3", ["nvidia/cu13/lib/libcublas.so.13"], 13),
        ("nvidia-cufft", "12.0.0.61", [], 13),
        ("nvidia-nvjitlink", "13.5.37", [], 13),
        ("nvidia-ml-py", "13.615.71", ["pynvml.py"], None),
        ("nvidia-dali", "", [], None),
        ("numpy", "2.4.6", [], None),
    ],
)
def test_cuda_major_reads_names_versions_and_files(name, version, files, major):
    """The one rule, used by the doctor on installed wheels and by `make pins` on Colab's freeze."""
    assert doctor.cuda_major(name, version, files) == major


def test_probe_nvidia_packages_reads_this_environment():
    probed = doctor.probe_nvidia_packages()
    if "nvidia-cudnn-cu13" not in probed["packages"]:
        pytest.skip("PyTorch's CUDA 13 wheels are not installed here")
    assert probed["packages"]["nvidia-cudnn-cu13"] == 13
    assert probed["packages"].get("nvidia-cuda-runtime") == 13
    assert not probed["clashes"], "the CPU set has no file owned twice"


def test_probe_nvidia_packages_on_faked_wheels(monkeypatch):
    """Any spelling of a name, the CUDA major of each, and a library file two wheels write."""

    def wheel(name, version, *files):
        return types.SimpleNamespace(metadata={"Name": name}, version=version, files=list(files))

    wheels = [
        wheel("nvidia_cudnn_cu12", "9.10.2.21", "nvidia/cudnn/lib/libcudnn.so.9"),
        wheel("nvidia-cudnn-cu13", "9.24.0.43", "nvidia/cudnn/lib/libcudnn.so.9"),
        wheel("nvidia-cublas", "13.1.1.3", "nvidia/cu13/lib/libcublas.so.13"),
        wheel("nvidia-ml-py", "13.615.71", "pynvml.py"),
        wheel("numpy", "2.4.6", "numpy/__init__.py"),
    ]
    monkeypatch.setattr(doctor.probes.importlib.metadata, "distributions", lambda: wheels)
    assert doctor.probe_nvidia_packages() == {
        "packages": {"nvidia-cudnn-cu12": 12, "nvidia-cudnn-cu13": 13, "nvidia-cublas": 13},
        "clashes": {"nvidia/cudnn/lib/libcudnn.so.9": ["nvidia-cudnn-cu12", "nvidia-cudnn-cu13"]},
    }


def test_probe_driver_reads_nvml(monkeypatch):
    """The driver probe on a faked NVML (nvidia-ml-py >= 12 decodes its strings): what a GPU machine
    reports."""
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
# wheels, all for CUDA 12 but one, nvidia-nccl-cu13, which owns the same libnccl.so.2 as
# nvidia-nccl-cu12.
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
            "packages": {name: doctor.cuda_major(name) for name in COLAB_NVIDIA},
            "clashes": {"nvidia/nccl/lib/libnccl.so.2": ["nvidia-nccl-cu12", "nvidia-nccl-cu13"]},
        },
    )


def test_colab_runtime_as_shipped_is_no_error_and_gets_no_course_venv_fix():
    """Colab ships two NCCL wheels for two CUDA majors; the course's .venv fixes (make lab, rm -rf
    .venv) do not apply."""
    findings = doctor.diagnose(colab_facts())
    assert "error" not in levels(findings) and "warning" not in levels(findings), findings
    assert not [f for f in findings if "make lab" in f.fix or ".venv" in f.fix], findings
    shipped = [f for f in findings if f.code in {"two_cuda_majors", "library_file_clash"}]
    assert levels(shipped) == ["info", "info"], shipped
    assert all(f.problem.endswith(doctor.AS_SHIPPED) for f in shipped)
    (dali,) = [f for f in findings if f.code == "framework_missing"]
    assert "Lesson 05's set-up cell" in dali.fix
    off_colab = doctor.diagnose(colab_facts() | {"colab": False})  # the same in the course's .venv
    assert only_error(off_colab).code == "library_file_clash"


def test_colab_is_recognized_in_a_command_the_notebook_runs(monkeypatch):
    """`!python -m gpucourse doctor` runs in a new process without google.colab imported; Colab's
    variable reaches it."""
    monkeypatch.setattr(doctor.probes, "probe_driver", lambda: {"found": False, "gpus": []})
    monkeypatch.setattr(doctor.probes, "probe_framework", lambda key: {"installed": False})
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
P100 = {"index": 0, "name": "Tesla P100-PCIE-16GB", "memory_gib": 15.9, "compute_capability": "6.0"}


def test_a_gpu_the_pytorch_build_has_no_kernels_for():
    machine = facts(
        driver={"gpus": [P100], "cuda": "12.8", "version": "570.1"},
        torch={
            "version": "2.11.0+cu128",
            "cuda": "12.8",
            "arch": CU128_ARCH,
            "devices": [P100["name"]],
        },
    )
    error = only_error(doctor.diagnose(machine))
    assert error.code == "no_kernels_for_gpu"
    assert "Tesla P100-PCIE-16GB (compute capability 6.0)" in error.problem
    # the fix names the builds that do have its kernels, and never the set it is running
    assert "CUDA 12.6 builds" in error.fix and "GPU=0" not in error.fix
    # the H100 runs them
    assert "error" not in levels(doctor.diagnose(facts(torch={"arch": CU128_ARCH})))


def test_no_driver_update_is_asked_for_a_build_without_kernels_for_the_gpu():
    """A P100 with driver 550 and PyPI's CUDA 13 build: updating the driver would only start a
    PyTorch that has no kernels for it."""
    machine = facts(
        driver={"gpus": [P100], "cuda": "12.4", "version": "550.54"},
        # 2.14's get_arch_list() answers without a working driver (2.11's is empty then)
        torch={"version": "2.14.1+cu130", "arch": CU128_ARCH, **NO_TORCH_GPU},
        tensorflow={"installed": False},
    )
    assert codes(doctor.diagnose(machine), "error") == ["no_kernels_for_gpu"]
    # a GPU the build has kernels for: the driver is what to fix
    machine["driver"]["gpus"] = [H100]
    assert codes(doctor.diagnose(machine), "error") == ["driver_too_old"]


def test_a_cpu_only_pytorch_beside_a_gpu_older_than_the_course_builds():
    """On a Pascal, PyTorch's CPU build is one of the answers: no error, and no advice to install
    a CUDA build that has no kernels for it."""
    machine = facts(
        driver={"gpus": [P100]},
        torch={"version": "2.14.1+cpu", "cuda": None, **NO_TORCH_GPU},
        tensorflow={"installed": False},
    )
    finding = next(f for f in doctor.diagnose(machine) if f.code == "cpu_only_torch")
    assert finding.level == "info" and "CUDA 12.6 builds" in finding.fix
    assert "error" not in levels(doctor.diagnose(machine))
