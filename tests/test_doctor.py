"""gpucourse.doctor: every usual failure diagnosed on a faked environment, and never a crash."""

import json
import subprocess
import sys

import pytest

from gpucourse import doctor
from gpucourse.__main__ import main as cli

H100 = {"index": 0, "name": "NVIDIA H100 80GB HBM3", "memory_gib": 79.6, "compute_capability": "9.0"}


def facts(**overrides):
    base = {
        "gpucourse": "0", "python": "3.11", "platform": "Linux", "colab": False, "cuda_visible_devices": None,
        "driver": {"found": True, "version": "580.65", "cuda": "13.0", "gpus": [H100], "error": None},
        "torch": {"installed": True, "version": "2.14.1+cu130", "cuda": "13.0", "cudnn": 92400,
                  "cuda_available": True, "devices": ["NVIDIA H100 80GB HBM3"], "error": None},
        "tensorflow": {"installed": True, "version": "2.21.0", "is_cuda_build": True, "cuda": "12.5.1",
                       "cudnn": "9", "gpus": 1, "error": None},
        "dali": {"installed": True, "version": "2.4.0", "error": None},
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
    assert "error" not in levels(findings) and doctor.exit_status(findings) == 0
    assert any("PyTorch sees 1 GPU" in f.problem for f in findings)


def test_no_driver_is_information_not_failure():
    findings = doctor.diagnose(facts(driver={"found": False, "gpus": [], "error": "NVML Shared Library Not Found"},
                                     torch={"cuda_available": False, "devices": []}, tensorflow={"gpus": 0}))
    assert doctor.exit_status(findings) == 0
    assert any(f.level == "info" and "No NVIDIA driver" in f.problem and "Colab" in f.fix for f in findings)


def test_cpu_only_torch_on_a_gpu_machine():
    error = only_error(doctor.diagnose(facts(torch={"version": "2.14.1+cpu", "cuda": None, "cuda_available": False,
                                                     "devices": []})))
    assert "CPU-only build" in error.problem and "pytorch.org" in error.fix


def test_driver_older_than_the_build():
    error = only_error(doctor.diagnose(facts(driver={"cuda": "12.2"}, torch={"cuda_available": False, "devices": []})))
    assert "12.2" in error.problem and "13.0" in error.problem and "Update the NVIDIA driver" in error.fix


def test_tensorflow_without_its_cuda_libraries():
    error = only_error(doctor.diagnose(facts(tensorflow={"gpus": 0})))
    assert "CUDA libraries are missing" in error.problem and "tensorflow[and-cuda]==2.21.0" in error.fix


@pytest.mark.parametrize("value", ["", "-1"])
def test_an_empty_cuda_visible_devices(value):
    findings = doctor.diagnose(facts(cuda_visible_devices=value, torch={"cuda_available": False, "devices": []},
                                     tensorflow={"gpus": 0}))
    error = only_error(findings)
    assert "CUDA_VISIBLE_DEVICES" in error.problem and "unset" in error.fix.lower()


def test_a_framework_that_fails_to_import():
    error = only_error(doctor.diagnose(facts(tensorflow={"error": "ImportError: libcudnn.so.9"})))
    assert "fails to import" in error.problem and "--force-reinstall" in error.fix


def test_missing_optional_frameworks_are_information():
    findings = doctor.diagnose(facts(tensorflow={"installed": False}, dali={"installed": False}))
    assert doctor.exit_status(findings) == 0
    assert sum("not installed" in f.problem for f in findings) == 2


def test_collect_survives_a_broken_probe(monkeypatch):
    def explode():
        raise RuntimeError("boom")

    monkeypatch.setattr(doctor, "probe_driver", explode)
    monkeypatch.setattr(doctor, "probe_tensorflow", explode)
    collected = doctor.collect()
    assert "boom" in collected["driver"]["error"] and "boom" in collected["tensorflow"]["error"]
    doctor.render(collected, doctor.diagnose(collected))


def test_a_torch_that_fails_to_import_is_reported(monkeypatch):
    monkeypatch.setitem(sys.modules, "torch", None)
    probed = doctor.probe_torch()
    assert probed["installed"] and "import of torch halted" in probed["error"]


def test_render_has_every_section():
    text = doctor.render(facts(), doctor.diagnose(facts()))
    for needle in ("NVIDIA driver 580.65", "GPU 0: NVIDIA H100", "PyTorch 2.14.1+cu130", "built for CUDA 13.0",
                   "TensorFlow 2.21.0", "DALI 2.4.0", "Diagnosis:"):
        assert needle in text


@pytest.mark.slow
def test_the_command_line_here():
    result = subprocess.run([sys.executable, "-m", "gpucourse", "doctor", "--json"], capture_output=True, text=True)
    report = json.loads(result.stdout)
    assert set(report) == {"facts", "findings"}
    assert result.returncode == (1 if any(f["level"] == "error" for f in report["findings"]) else 0)
    text = subprocess.run([sys.executable, "-m", "gpucourse", "doctor"], capture_output=True, text=True).stdout
    assert "environment report" in text and "Diagnosis:" in text


def test_cli_usage(capsys):
    assert cli([]) == 2 and "doctor" in capsys.readouterr().out
    assert cli(["nonsense"]) == 2
