"""gpucourse.frameworks: TensorFlow and DALI are optional and loaded only on request."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import gpucourse

MODULES = sorted(
    p.stem for p in Path(gpucourse.__file__).parent.glob("*.py") if not p.stem.startswith("_")
)
LOADED = (
    "loaded = lambda: sorted(m for m in ('torch', 'tensorflow', 'nvidia.dali') if m in "
    "sys.modules)\n"
)


def test_importing_gpucourse_loads_no_framework():
    """gpucourse, its CLIs and the modules they import load no framework (`python -m gpucourse
    doctor` must survive a broken one); seeding and every module load no TensorFlow or DALI:
    that half rides on the TensorFlow test's Python (the modules import torch: seconds)."""
    code = (
        "import sys, gpucourse, gpucourse.__main__, gpucourse.doctor, gpucourse.bench, "
        "gpucourse.frameworks\n" + LOADED + "print(loaded())"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout.split("\n")
    assert out[0] == "[]", (
        "import gpucourse (its doctor, bench, device, timing, notebook) must never import a "
        "framework"
    )


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
    # TF there, no plugin
    monkeypatch.setattr(gpucourse.frameworks, "import_tensorflow", lambda verbose=True: object())
    monkeypatch.setitem(sys.modules, "nvidia.dali.plugin.tf", None)
    assert gpucourse.import_dali_tf() is None
    assert "TensorFlow plugin is not installed" in capsys.readouterr().out


@pytest.mark.parametrize("driver", [False, True])
def test_tensorflow_start_up_noise_is_held_back_and_nothing_else(monkeypatch, capfd, driver):
    monkeypatch.setattr(gpucourse.frameworks, "nvidia_driver_present", lambda: driver)
    with gpucourse.frameworks.quiet_tensorflow_startup():
        os.write(
            2,
            b"WARNING: All log messages before absl::InitializeLog() is called are written to "
            b"STDERR\n"
            b"I0000 cudart_stub.cc:31] Could not find cuda drivers on your machine, GPU "
            b"will not be used.\n"
            b"I0000 port.cc:153] oneDNN custom operations are on. You may see slightly "
            b"different results\n"
            b"E0000 cuda_platform.cc:52] failed call to cuInit: INTERNAL: CUDA error: "
            b"UNKNOWN ERROR (303)\n"
            b"E0000 a real failure: libcudnn.so.9: cannot open shared object file\n",
        )
    err = capfd.readouterr().err
    assert "real failure" in err and "absl" not in err and "oneDNN" not in err
    assert ("cuInit" in err and "cuda drivers" in err) == driver, (
        "the CUDA lines are noise only without a driver"
    )
    os.write(2, b"after\n")
    assert capfd.readouterr().err == "after\n", "standard error is back to normal afterwards"


TENSORFLOW_SCRIPT = (
    """
import contextlib, importlib, io, json, os, sys
import gpucourse
from gpucourse import frameworks
"""
    + LOADED
    + """
gpucourse.set_seed(5)
for name in MODULES:
    importlib.import_module("gpucourse." + name)
# before TensorFlow: what seeding and every module load, and whether Triton or torchvision came too
print(json.dumps([loaded(), sorted({"triton", "torchvision"} & set(sys.modules))]))
tf = gpucourse.import_tensorflow()
if tf is None:
    sys.exit(print(json.dumps(None)))
first = float(tf.random.uniform(()))
gpucourse.set_seed(5)
gpus = tf.config.list_physical_devices("GPU")
report = {"seeded": first == float(tf.random.uniform(())), "gpus": len(gpus),
          "growth": [tf.config.experimental.get_memory_growth(g) for g in gpus],
          "driver": frameworks.nvidia_driver_present()}
os.environ["GPUCOURSE_REQUIRE_GPU"] = "1"
for installed in ("cpu", "gpu"):
    frameworks.course_set = lambda: installed
    with contextlib.redirect_stdout(io.StringIO()) as said:
        try:
            report[installed] = [gpucourse.import_tensorflow() is None, said.getvalue()]
        except RuntimeError as error:
            report[installed] = ["raised", str(error)]
# Triton, loaded by torchvision, segfaults after TensorFlow unless loaded first
import torchvision  # noqa: F401
print(json.dumps(report))
"""
)


@pytest.mark.slow
def test_tensorflow_in_a_fresh_python():
    """One TensorFlow-importing Python (never the test worker): seeding and every gpucourse module
    load no TensorFlow or DALI; then TensorFlow seeded, memory growth, quiet, strict mode,
    torchvision after."""
    result = subprocess.run(
        [sys.executable, "-c", f"MODULES = {MODULES!r}\n{TENSORFLOW_SCRIPT}"],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "0", "GPUCOURSE_REQUIRE_GPU": "0"},
    )
    assert result.returncode == 0, (
        f"the process died (exit status {result.returncode}):\n{result.stderr[-3000:]}"
    )
    lines = [line for line in result.stdout.splitlines() if line.startswith(("[", "{", "null"))]
    (before, pulled_in), report = json.loads(lines[0]), json.loads(lines[-1])
    assert before == ["torch"], (
        f"seeding and importing {MODULES} must import neither TensorFlow nor DALI"
    )
    assert not pulled_in, f"{pulled_in} before TensorFlow: the torchvision-after check means little"
    if report is None:
        pytest.skip("TensorFlow is not installed")
    assert report["seeded"] and all(report["growth"]), report
    if not report["driver"]:  # where a driver is, TensorFlow's CUDA lines are kept
        for noise in gpucourse.frameworks.TF_NOISE + gpucourse.frameworks.TF_NO_DRIVER_NOISE:
            assert noise not in result.stderr, result.stderr
    # `make test-gpu`: not validated on GPU in the CPU set, a failure in the GPU set
    if not report["gpus"]:
        assert report["cpu"][0] is True and "not validated on GPU" in report["cpu"][1], report
        assert (
            report["gpu"][0] == "raised"
            and "GPU set is installed, but TensorFlow sees no GPU" in report["gpu"][1]
        ), report
