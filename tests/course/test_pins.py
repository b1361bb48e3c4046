"""The course environment is pinned in one place; everything else derives from it."""

import json
import re
import subprocess
import sys

import coursekit as ck
import pytest
import tomllib
from coursetools import pins

from gpucourse.doctor import cuda_major

PROJECT = tomllib.loads((ck.ROOT / "pyproject.toml").read_text())["project"]


def test_derived_files_are_up_to_date():
    result = subprocess.run(
        [sys.executable, "-m", "coursetools.pins", "--check"],
        cwd=ck.ROOT,
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stdout


def test_the_course_extra_pins_every_package_exactly():
    for requirement in PROJECT["optional-dependencies"]["course"]:
        assert "==" in requirement, f"{requirement!r} must be pinned with =="


def test_the_helper_itself_never_names_a_framework():
    names = {pins.package_name(r.replace(">=", "==")) for r in PROJECT["dependencies"]}
    assert not names & {"torch", "tensorflow", "torchvision", "nvidia-dali-cuda120"}
    assert all("==" not in r for r in PROJECT["dependencies"]), (
        "the helper's own requirements stay loose"
    )


def test_the_helpers_version_is_written_once():
    """pyproject.toml reads it from gpucourse.__version__; the installed metadata agrees."""
    import importlib.metadata

    import gpucourse

    assert "version" not in PROJECT and "version" in PROJECT["dynamic"]
    dynamic = tomllib.loads((ck.ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    assert dynamic["dynamic"]["version"] == {"attr": "gpucourse.__version__"}
    assert importlib.metadata.version("gpucourse") == gpucourse.__version__, (
        "the installed helper's metadata is an older version's: `make release` (or "
        "`.venv/bin/python -m pip install --no-deps -e .`) reinstalls it"
    )
    assert "readme" not in PROJECT, "the course README is not the helper package's description"


def test_environment_yml_and_binder_carry_the_same_pins():
    env = (ck.ROOT / "environment.yml").read_text()
    binder = (ck.ROOT / "binder" / "requirements.txt").read_text().splitlines()
    for pin in PROJECT["optional-dependencies"]["course"]:
        assert f'"{pin}"' in env
        if pins.package_name(pin) in pins.NOT_ON_BINDER:
            assert not any(line.startswith(pins.package_name(pin)) for line in binder)
        else:
            assert pin.split(";")[0].strip() in binder


def test_environment_gpu_yml_carries_the_gpu_set_and_its_index():
    env = (ck.ROOT / "environment-gpu.yml").read_text()
    for pin in pins.gpu_pins():
        assert f'"{pin}"' in env
    assert f"--extra-index-url {pins.gpu_index()}" in env
    assert len({pins.package_name(p) for p in pins.gpu_pins()}) == len(pins.gpu_pins()), (
        "one pin a package"
    )


def test_the_gpu_set_names_one_cuda_major():
    """Every GPU-set pin that names a CUDA build (nvidia-dali-cuda120, torch +cu128, PyTorch's
    index) names the same one."""
    majors = {
        pins.package_name(pin): cuda_major(pins.package_name(pin), pin.split(";")[0])
        for pin in pins.gpu_pins()
    }
    majors["PyTorch's index"] = cuda_major("", "+" + pins.gpu_index().rstrip("/").rsplit("/", 1)[1])
    named = {name: major for name, major in majors.items() if major}
    assert {"torch", "torchvision", "nvidia-dali-cuda120", "PyTorch's index"} <= set(named), named
    assert len(set(named.values())) == 1, f"the GPU set mixes CUDA majors: {named}"


def test_the_gpu_set_names_a_torch_build_pytorch_publishes():
    """docs/pytorch-cuda-builds.toml lists the CUDA builds of each release; the GPU set's torch,
    torchvision and index must be one of them (checked against this table, not PyTorch's index: the
    project's CI runner reaches package registries only)."""
    assert pins.unpublished(pins.gpu_pins(), pins.gpu_index()) == []


@pytest.mark.parametrize(
    ("wanted", "index", "says"),
    [
        (
            ["torch==2.14.1+cu128", "torchvision==0.29.1+cu128"],
            "https://download.pytorch.org/whl/cu128",
            "PyTorch publishes no cu128 build of torch 2.14.1",
        ),
        (
            ["torch==2.11.0+cu128", "torchvision==0.29.1+cu128"],
            "https://download.pytorch.org/whl/cu128",
            "torchvision 0.29.1+cu128 is not the 0.26.x cu128 build",
        ),
        (
            ["torch==2.11.0+cu128", "torchvision==0.26.0+cu128"],
            "https://download.pytorch.org/whl/cu126",
            "is not PyTorch's cu128 index",
        ),
        (
            ["torch==2.9.1+cu128", "torchvision==0.24.1+cu128"],
            "https://download.pytorch.org/whl/cu128",
            "torch 2.9.1 is not in docs/pytorch-cuda-builds.toml",
        ),
        (
            ["torch==2.11.0", "torchvision==0.26.0"],
            "https://download.pytorch.org/whl/cu128",
            "pins no CUDA build of torch",
        ),
    ],
)
def test_a_build_pytorch_does_not_publish_is_named(wanted, index, says):
    problems = pins.unpublished(wanted, index)
    assert any(says in problem for problem in problems), problems


def test_the_builds_table_gives_each_build_its_architectures_and_sources():
    text = (ck.ROOT / pins.BUILDS).read_text()
    assert "RELEASE.md" in text and "pytorch/pytorch#175253" in text, (
        "the table names where it was read"
    )
    for release, facts in pins.published_builds().items():
        assert facts["pypi"] in facts["builds"] and facts["torchvision"].startswith("0."), release
        for build, about in facts["builds"].items():
            assert (
                about["cuda"].startswith(f"{build[2:4]}.{build[4]}") and about["architectures"]
            ), (release, build)


def test_the_gpu_set_is_colabs_versions_of_what_the_lessons_import():
    """One set of versions: the GPU set pins Colab's torch (with Colab's CUDA build), TensorFlow,
    Keras, numpy, ..., which the Colab set runs every lesson on in `make test`. A refreshed freeze
    that moves one fails here: choose the GPU set again (CONTRIBUTING, "The two sets")."""
    colab = pins.freeze()
    gpu = {
        pins.package_name(pin): pin.split(";")[0].split("==", 1)[1].strip()
        for pin in pins.gpu_pins()
    }
    for name in pins.LESSON_LIBRARIES:
        assert gpu.get(name) == colab[pins.package_name(name)], (
            f"the GPU set pins {name} {gpu.get(name)}, Colab's runtime has "
            f"{colab[pins.package_name(name)]}"
        )


def test_the_colab_set_is_the_freezes_versions():
    colab = pins.freeze()
    course = {pins.package_name(pin): pin for pin in pins.course_pins()}
    wanted = pins.colab_pins()
    for name in pins.LESSON_LIBRARIES + pins.COLAB_KERNEL:
        assert f"{name}=={pins.public(colab[pins.package_name(name)])}" in wanted
    for name in pins.COLAB_FROM_COURSE:
        assert pins.package_name(name) not in colab and course[name] in wanted
    constraints = pins.colab_constraints()
    assert (
        "jupyter-core==" + colab["jupyter-core"] in constraints
        and "tornado==" + colab["tornado"] in constraints
    )
    assert not [c for c in constraints if c.startswith(("nvidia-cudnn", "nvidia-nccl", "cuda-"))], (
        "PyTorch's CUDA libraries are PyPI torch's own, not Colab's"
    )


def test_the_freeze_says_where_and_when_it_was_taken():
    source, date = pins.freeze_source()
    assert "googlecolab/backend-info" in source and re.fullmatch(r"20\d\d-\d\d-\d\d", date)
    readme = (ck.ROOT / "README.md").read_text()
    assert date in readme, (
        f"the README names the date of Colab's freeze the course is tested with ({date})"
    )


def _tested_with(row: str) -> list[str]:
    """A row of docs/environments.md's "Tested with" table, by its first cell's start."""
    table = (ck.ROOT / "docs" / "environments.md").read_text()
    (line,) = [line for line in table.splitlines() if line.startswith(f"| {row}")]
    return [cell.strip() for cell in line.strip("|").split("|")]


def test_the_tested_with_table_names_the_versions_the_sets_run():
    """The oldest row is Colab's freeze; the newest is the CPU set, where a package it does not pin
    (Keras, IPython: pip resolves them beside TensorFlow and ipykernel) says so, never a version."""
    colab = pins.freeze()
    oldest = [pins.public(colab[name]) for name in ("torch", "tensorflow", "keras", "ipython")]
    oldest[-1] += f" (ipykernel {colab['ipykernel']})"
    assert _tested_with("oldest")[1:5] == oldest
    course = {pins.package_name(p): p.split(";")[0].split("==")[1] for p in pins.course_pins()}
    newest = [
        course.get(name, "not pinned") for name in ("torch", "tensorflow", "keras", "ipython")
    ]
    newest[-1] += f" (ipykernel {course['ipykernel']})"
    assert _tested_with("newest")[1:5] == newest


def test_the_readme_names_the_gpu_sets_build():
    readme = (ck.ROOT / "README.md").read_text()
    torch = next(p for p in pins.gpu_pins() if pins.package_name(p) == "torch")
    version = torch.split("==")[1]
    assert f"PyTorch {version}" in readme, (
        f"the README names the GPU set's build, PyTorch {version}"
    )


def test_a_changed_freeze_changes_the_colab_requirements(tmp_path):
    (tmp_path / "colab").mkdir()
    (tmp_path / "pyproject.toml").write_text((ck.ROOT / "pyproject.toml").read_text())
    freeze = (ck.ROOT / pins.FREEZE).read_text().replace("\nkeras==3.13.2\n", "\nkeras==3.99.0\n")
    (tmp_path / pins.FREEZE).write_text(freeze.replace("(2026-08-19,", "(2027-01-02,"))
    outputs = pins.outputs(tmp_path)
    assert "\nkeras==3.99.0\n" in outputs[tmp_path / "colab" / "requirements.txt"]
    assert "2027-01-02" in outputs[tmp_path / "colab" / "constraints.txt"]
    (tmp_path / pins.FREEZE).write_text(freeze.replace("\ntraitlets==", "\nnot-traitlets=="))
    with pytest.raises(ValueError, match="lists no traitlets"):
        pins.outputs(tmp_path)


@pytest.mark.parametrize(
    "requirement, name",
    [
        ("Jupyter_Client==8.6.3", "jupyter-client"),
        ("tensorflow[and-cuda]==2.20.0; sys_platform == 'linux'", "tensorflow"),
        ("nvidia-dali-cuda120==2.4.0; sys_platform == 'linux'", "nvidia-dali-cuda120"),
        ("zope.interface>=6", "zope-interface"),
        ("gpucourse @ git+https://github.com/gpus-for-ml/gpus-for-ml", "gpucourse"),
        ("numpy", "numpy"),
    ],
)
def test_package_name_is_the_normalized_name(requirement, name):
    assert pins.package_name(requirement) == name


def pypi_reachable() -> bool:
    import socket

    try:
        socket.create_connection(("pypi.org", 443), timeout=5).close()
        return True
    except OSError:
        return False


@pytest.mark.slow
def test_the_gpu_sets_pypi_part_resolves_on_one_cuda_major(tmp_path):
    """pip resolves the GPU set from PyPI (all but PyTorch's own wheels) and brings nvidia-*
    packages of one CUDA major. pip reads each wheel's metadata, not the wheel (PEP 658's file where
    the index serves one, else a range request: fast-deps), never downloading gigabytes of CUDA
    libraries to read a few lines."""
    if not pypi_reachable():
        pytest.skip("PyPI is not reachable from here")
    wanted = [p for p in pins.gpu_pins() if pins.package_name(p) not in {"torch", "torchvision"}]
    report = tmp_path / "report.json"
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--dry-run",
            "--use-feature=fast-deps",
            "--ignore-installed",
            "--quiet",
            "--only-binary=:all:",
            "--python-version",
            pins.PYTHON_VERSION,
            "--report",
            str(report),
            *[f"--platform=manylinux{tag}_x86_64" for tag in ("_2_28", "_2_27", "_2_17", "2014")],
            *wanted,
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    installed = {
        i["metadata"]["name"].lower(): i["metadata"]["version"]
        for i in json.loads(report.read_text())["install"]
    }
    nvidia = {name: cuda_major(name, version) for name, version in installed.items()}
    nvidia = {name: major for name, major in nvidia.items() if major}
    assert "nvidia-cudnn-cu12" in nvidia, "tensorflow[and-cuda] brings TensorFlow's CUDA libraries"
    assert set(nvidia.values()) == {12}, f"mixed CUDA majors: {nvidia}"


def test_a_changed_pin_changes_the_derived_files(tmp_path):
    pyproject = (ck.ROOT / "pyproject.toml").read_text()
    pin = next(p for p in PROJECT["optional-dependencies"]["course"] if p.startswith("tqdm=="))
    (tmp_path / "pyproject.toml").write_text(pyproject.replace(pin, "tqdm==0.0.0"))
    (tmp_path / "colab").mkdir()
    (tmp_path / pins.FREEZE).write_text((ck.ROOT / pins.FREEZE).read_text())
    outputs = pins.outputs(tmp_path)
    assert '"tqdm==0.0.0"' in outputs[tmp_path / "environment.yml"]
    assert "tqdm==0.0.0" in outputs[tmp_path / "binder" / "requirements.txt"]
