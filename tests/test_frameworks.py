"""gpucourse.frameworks: TensorFlow and DALI are optional and loaded only on request."""

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


def test_strict_mode_refuses_a_tensorflow_without_gpu(monkeypatch):
    gpucourse.frameworks.load_triton_before_tensorflow()
    tf = pytest.importorskip("tensorflow")
    if tf.config.list_physical_devices("GPU"):
        pytest.skip("TensorFlow sees a GPU here")
    monkeypatch.setenv("GPUCOURSE_REQUIRE_GPU", "1")
    with pytest.raises(gpucourse.GPURequiredError, match="TensorFlow sees no GPU"):
        gpucourse.import_tensorflow()


@pytest.mark.slow
def test_torchvision_still_imports_after_tensorflow():
    """With the course's pins, Triton imported after TensorFlow segfaults; import_tensorflow loads it first."""
    code = "import gpucourse; tf = gpucourse.import_tensorflow(verbose=False); import torchvision; print('alive')"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0 and "alive" in result.stdout, (
        f"the process died (exit status {result.returncode}):\n{result.stderr[-3000:]}"
    )
