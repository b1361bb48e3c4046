"""The course environment is pinned in one place; everything else derives from it."""

import json
import subprocess
import sys

import coursekit as ck
import pytest
import tomllib

sys.path.insert(0, str(ck.ROOT / "tools"))
import sync_pins  # noqa: E402

PROJECT = tomllib.loads((ck.ROOT / "pyproject.toml").read_text())["project"]


def test_derived_files_are_up_to_date():
    result = subprocess.run([sys.executable, "tools/sync_pins.py", "--check"], cwd=ck.ROOT, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout


def test_the_course_extra_pins_every_package_exactly():
    for requirement in PROJECT["optional-dependencies"]["course"]:
        assert "==" in requirement, f"{requirement!r} must be pinned with =="


def test_the_helper_itself_never_names_a_framework():
    names = {sync_pins.package_name(r.replace(">=", "==")) for r in PROJECT["dependencies"]}
    assert not names & {"torch", "tensorflow", "torchvision", "nvidia-dali-cuda120"}
    assert all("==" not in r for r in PROJECT["dependencies"]), "the helper's own requirements stay loose"


def test_environment_yml_and_binder_carry_the_same_pins():
    pins = PROJECT["optional-dependencies"]["course"]
    env = (ck.ROOT / "environment.yml").read_text()
    binder = (ck.ROOT / "binder" / "requirements.txt").read_text().splitlines()
    for pin in pins:
        assert f'"{pin}"' in env
        if sync_pins.package_name(pin) in sync_pins.NOT_ON_BINDER:
            assert not any(line.startswith(sync_pins.package_name(pin)) for line in binder)
        else:
            assert pin.split(";")[0].strip() in binder


def test_environment_gpu_yml_carries_the_gpu_set_and_its_index():
    env = (ck.ROOT / "environment-gpu.yml").read_text()
    for pin in sync_pins.gpu_pins():
        assert f'"{pin}"' in env
    assert f"--extra-index-url {sync_pins.gpu_index()}" in env
    assert len({sync_pins.package_name(p) for p in sync_pins.gpu_pins()}) == len(sync_pins.gpu_pins()), "one pin a package"


def test_the_gpu_set_names_one_cuda_major():
    """Every GPU-set pin that names a CUDA build (nvidia-dali-cuda120, torch +cu128, PyTorch's index) names the same one."""
    majors = {sync_pins.package_name(pin): sync_pins.cuda_major(sync_pins.package_name(pin), pin.split(";")[0])
              for pin in sync_pins.gpu_pins()}
    majors["PyTorch's index"] = sync_pins.cuda_major("", "+" + sync_pins.gpu_index().rstrip("/").rsplit("/", 1)[1])
    named = {name: major for name, major in majors.items() if major}
    assert {"torch", "torchvision", "nvidia-dali-cuda120", "PyTorch's index"} <= set(named), named
    assert len(set(named.values())) == 1, f"the GPU set mixes CUDA majors: {named}"


def test_cuda_major_reads_the_names_nvidia_and_pytorch_use():
    assert sync_pins.cuda_major("nvidia-cudnn-cu12") == 12 and sync_pins.cuda_major("nvidia_nccl_cu13") == 13
    assert sync_pins.cuda_major("nvidia-dali-cuda120") == 12 and sync_pins.cuda_major("nvidia-dali-cuda130") == 13
    assert sync_pins.cuda_major("torch", "torch==2.14.1+cu128") == 12 and sync_pins.cuda_major("torch", "2.14.1") is None
    assert sync_pins.cuda_major("nvidia-cublas", "13.1.1.3") == 13  # CUDA 13's wheels drop the suffix
    assert sync_pins.cuda_major("nvidia-ml-py") is None and sync_pins.cuda_major("numpy") is None


def pypi_reachable() -> bool:
    import socket

    try:
        socket.create_connection(("pypi.org", 443), timeout=5).close()
        return True
    except OSError:
        return False


@pytest.mark.slow
def test_the_gpu_sets_pypi_part_resolves_on_one_cuda_major(tmp_path):
    """pip resolves the GPU set from PyPI (all but PyTorch's own wheels) and brings nvidia-* packages of one CUDA major."""
    if not pypi_reachable():
        pytest.skip("PyPI is not reachable from here")
    pins = [p for p in sync_pins.gpu_pins() if sync_pins.package_name(p) not in {"torch", "torchvision"}]
    report = tmp_path / "report.json"
    result = subprocess.run([sys.executable, "-m", "pip", "install", "--dry-run", "--ignore-installed", "--quiet",
                             "--only-binary=:all:", "--python-version", sync_pins.PYTHON, "--report", str(report),
                             *[f"--platform=manylinux{tag}_x86_64" for tag in ("_2_28", "_2_27", "_2_17", "2014")], *pins],
                            capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    installed = {i["metadata"]["name"].lower(): i["metadata"]["version"] for i in json.loads(report.read_text())["install"]}
    nvidia = {name: sync_pins.cuda_major(name, version) for name, version in installed.items()}
    nvidia = {name: major for name, major in nvidia.items() if major}
    assert "nvidia-cudnn-cu12" in nvidia, "tensorflow[and-cuda] brings TensorFlow's CUDA libraries"
    assert set(nvidia.values()) == {12}, f"mixed CUDA majors: {nvidia}"


def test_a_changed_pin_changes_the_derived_files(tmp_path):
    pyproject = (ck.ROOT / "pyproject.toml").read_text()
    pin = next(p for p in PROJECT["optional-dependencies"]["course"] if p.startswith("tqdm=="))
    (tmp_path / "pyproject.toml").write_text(pyproject.replace(pin, "tqdm==0.0.0"))
    outputs = sync_pins.outputs(tmp_path)
    assert '"tqdm==0.0.0"' in outputs[tmp_path / "environment.yml"]
    assert "tqdm==0.0.0" in outputs[tmp_path / "binder" / "requirements.txt"]


# ------------------------------------------------ `make` picks the set (faked nvidia-smi, scratch .venv, no pip)
FAKE_PYTHON = """#!{python}
# `python -m venv DIR` makes a .venv whose python logs `-m pip ...` instead of installing; other calls run for real.
import os, sys
venv = sys.argv[3]
os.makedirs(venv + "/bin", exist_ok=True)
open(venv + "/pyvenv.cfg", "w").write("home = fake\\n")
with open(venv + "/bin/python", "w") as out:
    out.write("#!/bin/sh\\nif [ \\"$1 $2\\" = '-m pip' ]; then echo \\"$*\\" >> {venv}/pip.log; exit 0; fi\\n"
              "exec {python} \\"$@\\"\\n".format(venv=os.path.abspath(venv), python=sys.executable))
os.chmod(venv + "/bin/python", 0o755)
"""


@pytest.fixture
def checkout(tmp_path):
    """A scratch copy of what the set-up reads, a fake base Python, and a bin/ for a fake nvidia-smi."""
    for name in ("Makefile", "pyproject.toml"):
        (tmp_path / name).write_text((ck.ROOT / name).read_text())
    (tmp_path / "bin").mkdir()
    fake = tmp_path / "bin" / "python-fake"
    fake.write_text(FAKE_PYTHON.replace("{python}", sys.executable, 1))
    fake.chmod(0o755)
    return tmp_path


def make(checkout, *args, gpu_listed=None, **environ):
    """`make -s .venv/.gpucourse-installed ARGS` with nvidia-smi listing `gpu_listed` (None: no nvidia-smi at all)."""
    smi = checkout / "bin" / "nvidia-smi"
    smi.unlink(missing_ok=True)
    if gpu_listed:
        smi.write_text(f"#!/bin/sh\necho 'GPU 0: {gpu_listed} (UUID: GPU-5fd4ab3e-0000)'\n")
        smi.chmod(0o755)
    env = {"PATH": f"{checkout / 'bin'}:/usr/bin:/bin", "HOME": str(checkout), **environ}
    result = subprocess.run(["make", "-s", ".venv/.gpucourse-installed", f"PYTHON={checkout / 'bin' / 'python-fake'}",
                             *args], cwd=checkout, env=env, capture_output=True, text=True, timeout=120)
    pip_log = checkout / ".venv" / "pip.log"
    installs = pip_log.read_text().splitlines() if pip_log.exists() else []
    pip_log.unlink(missing_ok=True)
    return result, [line for line in installs if " -e " in line]


def test_no_nvidia_gpu_means_the_cpu_set(checkout):
    result, installs = make(checkout)
    assert result.returncode == 0, result.stderr
    assert "the cpu set (nvidia-smi lists no NVIDIA GPU here" in result.stdout
    assert installs == ["-m pip install --quiet -e .[course]"]
    assert (checkout / ".venv" / ".gpucourse-set").read_text().strip() == "cpu"


def test_a_gpu_that_nvidia_smi_lists_means_the_gpu_set(checkout):
    result, installs = make(checkout, gpu_listed="NVIDIA H100 80GB HBM3")
    assert "the gpu set (nvidia-smi lists GPU 0: NVIDIA H100 80GB HBM3;" in result.stdout, result.stdout + result.stderr
    index = tomllib.loads((ck.ROOT / "pyproject.toml").read_text())["tool"]["gpucourse"]["gpu-index"]
    assert installs == [f"-m pip install --quiet --extra-index-url {index} -e .[course,gpu]"]


@pytest.mark.parametrize(("flag", "listed", "chosen"), [("GPU=0", "NVIDIA H100", "cpu"), ("GPU=1", None, "gpu")])
def test_gpu_0_and_gpu_1_override_nvidia_smi(checkout, flag, listed, chosen):
    result, installs = make(checkout, flag, gpu_listed=listed)
    assert f"the {chosen} set ({flag} was given)" in result.stdout
    assert installs[0].endswith("[course,gpu]" if chosen == "gpu" else "[course]")


def test_a_wrong_gpu_value_is_refused(checkout):
    result, installs = make(checkout, "GPU=yes")
    assert result.returncode != 0 and "use GPU=1" in result.stderr and not installs


def test_an_unrelated_gpu_variable_in_the_shell_is_ignored(checkout):
    result, installs = make(checkout, gpu_listed="NVIDIA L4", GPU="nvidia")
    assert "the gpu set (nvidia-smi lists GPU 0: NVIDIA L4" in result.stdout, result.stderr
    assert make(checkout, GPU="0")[0].stdout.count("GPU=0 was given") == 1, "GPU=0 exported still decides"


def test_switching_sets_rebuilds_the_venv_from_scratch_once(checkout):
    make(checkout)
    (checkout / ".venv" / "left-over").write_text("a CUDA 13 library")
    result, installs = make(checkout, gpu_listed="NVIDIA L4")
    assert ".venv holds the cpu set and is rebuilt" in result.stdout
    assert installs[0].endswith("[course,gpu]") and not (checkout / ".venv" / "left-over").exists()
    again, installs = make(checkout, gpu_listed="NVIDIA L4")
    assert again.returncode == 0 and installs == [] and "rebuilt" not in again.stdout


def test_a_venv_from_before_the_two_sets_counts_as_the_cpu_set(checkout):
    make(checkout)
    (checkout / ".venv" / ".gpucourse-set").unlink()
    result, installs = make(checkout)
    assert result.returncode == 0 and installs == [] and "rebuilt" not in result.stdout
