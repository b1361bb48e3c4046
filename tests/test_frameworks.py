"""gpucourse.frameworks: TensorFlow and DALI are optional and loaded only on request."""

import os
import subprocess
import sys

import pytest

import gpucourse


def test_importing_gpucourse_loads_no_framework():
    code = (
        "import sys, gpucourse, gpucourse.doctor, gpucourse.frameworks;"
        "print(sorted(m for m in ('torch', 'tensorflow', 'nvidia.dali') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]", "import gpucourse must stay cheap and never import torch, TensorFlow or DALI"


def test_a_missing_tensorflow_is_one_clear_sentence(monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "tensorflow", None)  # makes `import tensorflow` fail
    assert gpucourse.import_tensorflow() is None
    out = capsys.readouterr().out
    assert "TensorFlow is not installed" in out and "skipped" in out


def test_a_broken_tensorflow_is_reported_not_raised(monkeypatch, capsys):
    class Broken:
        def find_spec(self, name, path=None, target=None):
            if name == "tensorflow":
                raise OSError("libcudart.so.12: cannot open shared object file")

    monkeypatch.delitem(sys.modules, "tensorflow", raising=False)
    monkeypatch.setattr(sys, "meta_path", [Broken(), *sys.meta_path])
    assert gpucourse.import_tensorflow() is None
    assert "fails to import" in capsys.readouterr().out


def test_a_missing_dali_is_one_clear_sentence(monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "nvidia.dali", None)
    assert gpucourse.import_dali() is None
    assert "DALI is not installed" in capsys.readouterr().out


def test_a_missing_dali_tf_plugin_is_one_clear_sentence(monkeypatch, capsys):
    monkeypatch.setattr(gpucourse.frameworks, "import_tensorflow", lambda verbose=True: object())  # TF there, no plugin
    monkeypatch.setitem(sys.modules, "nvidia.dali.plugin.tf", None)
    assert gpucourse.import_dali_tf() is None
    assert "TensorFlow plugin is not installed" in capsys.readouterr().out


@pytest.mark.slow
def test_tensorflow_loads_with_memory_growth_and_the_seed():
    code = (
        "import gpucourse; gpucourse.set_seed(5); tf = gpucourse.import_tensorflow();"
        "a = float(tf.random.uniform(())); gpucourse.set_seed(5); print(a == float(tf.random.uniform(())))"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    if "TensorFlow is not installed" in result.stdout:
        pytest.skip("TensorFlow is not installed")
    assert result.stdout.strip().endswith("True"), result.stdout + result.stderr


@pytest.mark.parametrize("installed_set", ["cpu", "gpu"])
def test_strict_mode_skips_tensorflow_without_gpu_except_in_the_gpu_set(monkeypatch, capsys, installed_set):
    """`make test-gpu`: in the CPU set TensorFlow's cells are not validated on GPU; in the GPU set it is a failure."""
    gpucourse.frameworks.load_triton_before_tensorflow()
    tf = pytest.importorskip("tensorflow")
    if tf.config.list_physical_devices("GPU"):
        pytest.skip("TensorFlow sees a GPU here")
    monkeypatch.setenv("GPUCOURSE_REQUIRE_GPU", "1")
    monkeypatch.setattr(gpucourse.frameworks, "course_set", lambda: installed_set)
    if installed_set == "gpu":
        with pytest.raises(gpucourse.GPURequiredError, match="GPU set is installed, but TensorFlow sees no GPU"):
            gpucourse.import_tensorflow()
    else:
        assert gpucourse.import_tensorflow() is None
        assert "not validated on GPU" in capsys.readouterr().out


@pytest.mark.parametrize("driver", [False, True])
def test_tensorflow_start_up_noise_is_held_back_and_nothing_else(monkeypatch, capfd, driver):
    monkeypatch.setattr(gpucourse.frameworks, "nvidia_driver_present", lambda: driver)
    with gpucourse.frameworks.quiet_tensorflow_startup():
        os.write(2, b"WARNING: All log messages before absl::InitializeLog() is called are written to STDERR\n"
                    b"I0000 cudart_stub.cc:31] Could not find cuda drivers on your machine, GPU will not be used.\n"
                    b"I0000 port.cc:153] oneDNN custom operations are on. You may see slightly different results\n"
                    b"E0000 cuda_platform.cc:52] failed call to cuInit: INTERNAL: CUDA error: UNKNOWN ERROR (303)\n"
                    b"E0000 a real failure: libcudnn.so.9: cannot open shared object file\n")
    err = capfd.readouterr().err
    assert "real failure" in err and "absl" not in err and "oneDNN" not in err
    assert ("cuInit" in err and "cuda drivers" in err) == driver, "the CUDA lines are noise only without a driver"
    os.write(2, b"after\n")
    assert capfd.readouterr().err == "after\n", "standard error is back to normal afterwards"


@pytest.mark.slow
def test_importing_tensorflow_here_prints_no_start_up_noise():
    result = subprocess.run([sys.executable, "-c", "import gpucourse; print(gpucourse.import_tensorflow() is not None)"],
                            capture_output=True, text=True, env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "0"})
    if result.stdout.strip() != "True":
        pytest.skip("TensorFlow is not installed")
    if gpucourse.frameworks.nvidia_driver_present():
        pytest.skip("an NVIDIA driver is here: TensorFlow's CUDA lines are kept")
    for noise in gpucourse.frameworks.TF_NOISE + gpucourse.frameworks.TF_NO_DRIVER_NOISE:
        assert noise not in result.stderr, result.stderr


@pytest.mark.slow
def test_torchvision_still_imports_after_tensorflow():
    """With the course's pins, Triton imported after TensorFlow segfaults; import_tensorflow loads it first."""
    code = "import gpucourse; tf = gpucourse.import_tensorflow(verbose=False); import torchvision; print('alive')"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0 and "alive" in result.stdout, (
        f"the process died (exit status {result.returncode}):\n{result.stderr[-3000:]}"
    )
