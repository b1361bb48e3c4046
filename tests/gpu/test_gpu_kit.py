"""The GPU kit (coursetools.gpukit) on a CPU: the suite it adds beside an existing PyTorch, only
what the machine lacks (`make wheelhouse HAVE=...`), installed offline (coursetools.gpurun.wheels)
without ever replacing that PyTorch; the kit for the first GPU machine fits 48 MiB; a stand-in GPU
machine built from what CI has installs the kit with no index reachable and runs the runner end to
end in a CPU rehearsal, grading included."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import pytest
from coursetools.course import ROOT
from coursetools.gpukit import kit
from coursetools.gpurun import preflight, wheels
from coursetools.pins import package_name

# The first GPU machine's `pip freeze`: Python 3.12, torch 2.11.0+cu130, no Jupyter, no grader.
GPU_MACHINE = ROOT / "tests" / "fixtures" / "gpu-machine" / "packages.txt"
OFFLINE = {
    "PIP_CONFIG_FILE": os.devnull,
    "PIP_INDEX_URL": "http://127.0.0.1:9/simple",
    "PIP_NO_INPUT": "1",
    "PIP_DISABLE_PIP_VERSION_CHECK": "1",
    "http_proxy": "http://127.0.0.1:9",
    "https_proxy": "http://127.0.0.1:9",
}


def _offline_env(**extra) -> dict:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("PIP_") and k.lower() not in {"http_proxy", "https_proxy", "pythonpath"}
    }
    return {**env, **OFFLINE, **extra}


def test_the_suite_beside_pytorch_and_its_wheelhouse_commands():
    suite, bare = wheels.pinned(wheels.SUITE), wheels.pinned(wheels.NO_DEPS)
    assert "nbval==0.11.0" in suite and "ipykernel==7.4.0" in suite and "sqlalchemy" in suite
    assert bare == ["nbgrader==0.9.6", "jupyter-server"], "nbgrader without its user interface"
    assert not [
        r
        for r in suite + bare
        if re.match(r"(torch|tensorflow|nvidia-dali|keras|jupyterlab|notebook)", r)
    ]
    present = {
        "torch": "2.8.0a0+5228986c39.nv25.06",
        "nvidia-cudnn-cu12": "9.10.2.21",
        "numpy": "1.26.4",
        "nbval": "0.10.0",
        "nvidia-ml-py": "12.575.51",
        "jupyterlab": "4.0.0",
    }
    commands, constraints = wheels.setup_plan(present, suite, bare, "/c.txt", "/wh", "/opt/py")
    assert (
        constraints
        == "numpy==1.26.4\nnvidia-cudnn-cu12==9.10.2.21\ntorch==2.8.0a0+5228986c39.nv25.06\n"
    )
    suite_install, bare_install = commands
    assert suite_install[:9] == [
        "/opt/py",
        "-m",
        "pip",
        "install",
        "--disable-pip-version-check",
        "--no-index",
        "--find-links",
        "/wh",
        "--constraint",
    ]
    assert "nbval==0.11.0" not in suite_install and "numpy==2.4.6" not in suite_install, (
        "present: left as is"
    )
    assert "ipykernel==7.4.0" in suite_install and "nvidia-ml-py==13.615.71" not in suite_install
    assert bare_install[-3:] == ["--no-deps", "nbgrader==0.9.6", "jupyter-server"]
    assert suite_install[9] == "/c.txt", "the constraints file"
    everything = {package_name(r): "1" for r in suite + bare}
    assert wheels.setup_plan({**present, **everything}, suite, bare, "/c.txt")[0] == [], (
        "nothing left to add"
    )

    first, second = kit.download_commands(Path("/wh"), "3.12", "manylinux_2_28_x86_64")
    assert first[1:6] == [
        "-m",
        "pip",
        "download",
        "--disable-pip-version-check",
        "--only-binary=:all:",
    ]
    assert (
        first[6:10] == ["--dest", "/wh", "--python-version", "3.12"]
        and first[-len(suite) :] == suite
    )
    assert second[-3:] == ["--no-deps", *bare]
    platforms = first[11 : -len(suite) : 2]
    assert set(first[10 : -len(suite) : 2]) == {"--platform"}, (
        "pip widens manylinux2014 alone: each one named"
    )
    assert platforms[:2] == ["manylinux_2_28_x86_64", "manylinux_2_27_x86_64"]
    assert platforms[-3:] == ["manylinux2014_x86_64", "manylinux2010_x86_64", "manylinux1_x86_64"]
    assert kit.platforms("win_amd64") == ["win_amd64"]


def test_only_what_the_machine_lacks(tmp_path):
    have = tmp_path / "have.txt"
    have.write_text(
        "# a comment\ntorch==2.11.0+cu130\nNumPy==2.5.2\njupyter_core\n-e git+https://x/y\n"
        "pillow @ file:///build/pillow\n\n"
    )
    assert kit.have_names(have) == {"torch", "numpy", "jupyter-core", "pillow"}
    names = kit.have_names(GPU_MACHINE)
    assert {"torch", "torchvision", "numpy", "pytest", "nvidia-ml-py"} <= names
    assert "nbgrader" not in names
    for name in (
        "numpy-2.4.6-cp312-cp312-manylinux_2_28_x86_64.whl",
        "jupyter_core-5.9.1-py3-none-any.whl",
        "nbgrader-0.9.6-py3-none-any.whl",
    ):
        (tmp_path / name).touch()
    assert kit.prune(tmp_path, kit.have_names(have)) == [
        "jupyter_core-5.9.1-py3-none-any.whl",
        "numpy-2.4.6-cp312-cp312-manylinux_2_28_x86_64.whl",
    ]
    assert [p.name for p in tmp_path.glob("*.whl")] == ["nbgrader-0.9.6-py3-none-any.whl"]


def test_the_kits_one_command_is_valid_shell_and_runs_the_three_steps(tmp_path):
    script = tmp_path / kit.SCRIPT
    script.write_text(kit.KIT_SCRIPT)
    assert subprocess.run(["sh", "-n", str(script)]).returncode == 0
    text = script.read_text()
    steps = [
        line.split(" -m coursetools.gpurun ")[1]
        for line in text.splitlines()
        if " -m coursetools" in line
    ]
    assert steps == ['--preflight "$@"', "--setup --wheelhouse wheels", '--artifacts "$OUT" "$@"']
    assert "--without-pip --system-site-packages .gpu-env" in text, (
        "the machine's PyTorch, never replaced"
    )
    message = kit.kit_message(
        tmp_path / "gpu-kit", {"size_mib": 37.2, "wheels": ["a"] * 60, "left_out": []}
    )
    assert (
        "sh gpu-kit/gpu-kit.sh" in message
        and "gpu-kit/gpu-run/" in message
        and "OVER" not in message
    )
    assert "IT IS OVER 48 MiB" in kit.kit_message(
        tmp_path, {"size_mib": 50.0, "wheels": [], "left_out": []}
    )


@pytest.mark.skipif(shutil.which("make") is None, reason="needs make")
def test_make_test_gpu_in_an_existing_environment_make_wheelhouse_and_make_gpu_kit():
    """What make would run (make -n): the named Python's environment, never .venv's set-up; the
    wheels and kit."""

    def dry(*args):
        env = {
            k: v
            for k, v in os.environ.items()
            if k not in {"ENV", "PYTHON", "WHEELHOUSE", "MAKEFLAGS"}
        }
        done = subprocess.run(
            ["make", "-n", "--no-print-directory", *args],
            cwd=ROOT,
            capture_output=True,
            text=True,
            env=env,
            timeout=60,
        )
        return [
            line for line in done.stdout.splitlines() if not line.startswith("course environment:")
        ]

    preflight, setup, run = dry(
        "test-gpu", "ENV=system", "WHEELHOUSE=/w", "GPU_ARGS=02_tensors_on_device --require-all"
    )
    python = preflight.split()[1]  # PYTHONPATH=tools python3 -m coursetools.gpurun ...
    assert "/.venv/" not in python and os.path.basename(python).startswith("python3"), (
        "the system's python3"
    )
    assert setup == f"PYTHONPATH=tools {python} -m coursetools.gpurun --setup --wheelhouse /w"
    assert (
        run == f"PYTHONPATH=tools {python} -m coursetools.gpurun 02_tensors_on_device --require-all"
    )
    assert dry("test-gpu", f"PYTHON={sys.executable}")[1:] == [
        f"PYTHONPATH=tools {sys.executable} -m coursetools.gpurun --setup ",
        f"PYTHONPATH=tools {sys.executable} -m coursetools.gpurun ",
    ]
    assert "holds no PyTorch: add ENV=system" in dry("test-gpu", "WHEELHOUSE=/w")[1], (
        "a wheelhouse alone: no .venv"
    )
    wheelhouse = dry(
        "wheelhouse", "WHEELHOUSE=/w", "PY=3.12", "PLATFORM=manylinux_2_28_x86_64", "HAVE=p.txt"
    )
    assert wheelhouse[-1].endswith(
        "-m coursetools.gpukit wheels /w --python-version 3.12 "
        "--platform manylinux_2_28_x86_64 --have p.txt"
    )
    gpu_kit = dry("gpu-kit", "KIT=/k", "HAVE=p.txt", "PY=3.12", "PLATFORM=manylinux_2_28_x86_64")
    assert gpu_kit[-1].endswith(
        "-m coursetools.gpukit kit /k --have p.txt --python-version 3.12 "
        "--platform manylinux_2_28_x86_64"
    )


def _wheel(folder: Path, name: str, version: str, *requires: str) -> Path:
    """A tiny pure-Python wheel: a package whose __init__ holds its version."""
    info = f"{name}-{version}.dist-info"
    files = {
        f"{name}/__init__.py": f"__version__ = {version!r}\n",
        f"{info}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n"
        + "".join(f"Requires-Dist: {r}\n" for r in requires),
        f"{info}/WHEEL": "Wheel-Version: 1.0\nGenerator: tests\nRoot-Is-Purelib: true\n"
        "Tag: py3-none-any\n",
    }
    files[f"{info}/RECORD"] = "".join(f"{f},,\n" for f in [*files, f"{info}/RECORD"])
    path = folder / f"{name}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as archive:
        for file, text in files.items():
            archive.writestr(file, text)
    return path


@pytest.mark.slow
def test_setup_installs_offline_from_a_wheelhouse_beside_the_present_torch_and_never_replaces_it(
    tmp_path,
):
    """`make test-gpu ENV=system WHEELHOUSE=dir` with no index: the environment has a (fake) torch
    2.99; the wheelhouse holds the suite (here two small packages), and a torch 3.0 pip would
    happily upgrade to."""
    offline = _offline_env(
        PYTHONPATH=str(ROOT / "tools")
    )  # as `make test-gpu` runs it: from the checkout
    env = tmp_path / "env"
    subprocess.run(
        [sys.executable, "-m", "venv", "--without-pip", "--system-site-packages", env], check=True
    )
    python = str(env / "bin" / "python")
    if subprocess.run([python, "-m", "pip", "--version"], capture_output=True).returncode != 0:
        shutil.rmtree(env)  # a base Python without pip: the environment gets its own
        subprocess.run([sys.executable, "-m", "venv", env], check=True)

    def run(*args):
        return subprocess.run(
            [python, *args], capture_output=True, text=True, env=offline, cwd=ROOT, timeout=120
        )

    wheels, house = tmp_path / "wheels", tmp_path / "wheelhouse"
    wheels.mkdir(), house.mkdir()
    if run("-c", "import torch").returncode != 0:  # the base Python has no torch of its own
        done = run("-m", "coursetools.gpurun", "--setup", "--wheelhouse", house)
        assert done.returncode == 2 and "has no PyTorch" in done.stderr, (
            "without PyTorch: nothing to add to"
        )
    purelib = run("-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])").stdout.strip()
    zipfile.ZipFile(_wheel(wheels, "torch", "2.99.0")).extractall(
        purelib
    )  # installed as a wheel installs
    for wheel in (
        ("torch", "3.0.0"),
        ("fakesuite", "1.0", "torch>=2", "fakedep"),
        ("fakedep", "1.0"),
        ("fakenew", "1.0", "torch>=3"),
    ):
        _wheel(house, *wheel)
    torch_files = sorted(p for p in (env / "lib").rglob("torch*/*") if p.is_file())
    before = {p: p.read_bytes() for p in torch_files}
    suite, newer = tmp_path / "suite.txt", tmp_path / "newer.txt"
    suite.write_text("fakesuite==1.0\n"), newer.write_text("fakenew==1.0\n")

    done = run(
        "-m", "coursetools.gpurun", "--setup", "--wheelhouse", house, "--requirements", suite
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "--no-index --find-links" in done.stdout and "--constraint" in done.stdout
    assert "added 2 package(s) (fakedep, fakesuite) beside PyTorch 2.99.0" in done.stdout
    shown = run(
        "-c", "import torch, fakesuite, gpucourse; print(torch.__version__, gpucourse.__file__)"
    )
    assert shown.stdout.split() == ["2.99.0", str(ROOT / "utils" / "gpucourse" / "__init__.py")]
    assert {p: p.read_bytes() for p in torch_files} == before, "the present torch is untouched"

    done = run(
        "-m", "coursetools.gpurun", "--setup", "--wheelhouse", house, "--requirements", newer
    )
    assert done.returncode == 1 and "PyTorch 2.99.0 is kept as it is (offline" in done.stderr, (
        "needs torch 3"
    )
    assert run("-c", "import torch; print(torch.__version__)").stdout.strip() == "2.99.0"
    assert {p: p.read_bytes() for p in torch_files} == before

    done = run(
        "-m", "coursetools.gpurun", "--setup", "--wheelhouse", house, "--requirements", suite
    )
    assert done.returncode == 0 and "$ " not in done.stdout and "none missing" in done.stdout


def _index_reachable(tmp_path: Path) -> str | None:
    """None when PyPI answers pip (the kit's wheels come from it), else why not."""
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "download",
            "--no-deps",
            "--only-binary=:all:",
            "-q",
            "--disable-pip-version-check",
            "--dest",
            str(tmp_path / "probe"),
            "nbgrader==0.9.6",
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    return (
        None
        if done.returncode == 0
        else f"the package index is unreachable: {done.stderr.strip()[-200:]}"
    )


@pytest.mark.slow
@pytest.mark.ci_required  # PyPI answers in CI: a skip there fails
def test_the_kit_for_the_first_gpu_machine_fits_48_mib(tmp_path):
    """tests/fixtures/gpu-machine/packages.txt: Python 3.12, torch 2.11.0+cu130, no Jupyter, 64 MiB
    a command."""
    why = _index_reachable(tmp_path)
    if why:
        pytest.skip(why)
    made = kit.make_kit(tmp_path / "gpu-kit", GPU_MACHINE, "3.12", "manylinux_2_28_x86_64")
    names = {package_name(name.split("-")[0]) for name in made["wheels"]}
    assert made["size_mib"] <= kit.KIT_LIMIT_MIB, (
        f"{made['size_mib']} MiB: {sorted(made['wheels'])}"
    )
    assert {"nbgrader", "nbval", "ipykernel", "sqlalchemy"} <= names
    assert not names & {"torch", "torchvision", "numpy", "jupyterlab", "notebook", "babel"}, (
        "never needed"
    )
    assert (tmp_path / "gpu-kit" / "gpu-kit.sh").exists() and (
        tmp_path / "gpu-kit" / "solutions"
    ).is_dir()
    assert (
        json.loads((tmp_path / "gpu-kit" / "KIT.json").read_text())["size_mib"] == made["size_mib"]
    )


def _stand_in_base() -> tuple[Path, dict]:
    """The environment a stand-in GPU machine is layered on: the Colab set (torch 2.11 CUDA 13, as
    on the GPU machine) where `make test` built it, else this one; and what the runner's torchvision
    probe (preflight.probe_torchvision) reads there, in that Python, not this one."""
    colab = Path(os.environ.get("GPUCOURSE_COLAB_VENV") or ROOT / ".venv-colab") / "bin" / "python"
    for python in (colab, Path(sys.executable)):
        if python.exists() and (facts := preflight.probe_torchvision(str(python))).get("torch"):
            return python, facts
    raise AssertionError(f"no PyTorch in {colab} nor in {sys.executable}")


SMALLEST = "00_smallest_lesson"


def _smallest_lesson(solutions: Path) -> None:
    """A lesson of three cells in the kit's solutions/: the course's set-up cell (lesson 01's), a
    measurement and its GPU check, so the rehearsal runs a lesson and records a claim in seconds."""
    setup = next(
        "".join(cell["source"])
        for cell in json.loads((solutions / "01_verify_gpu" / "verify_gpu.ipynb").read_text())[
            "cells"
        ]
        if cell["cell_type"] == "code"
    )
    check = (
        "# @title GPU check: a synchronized stopwatch times the work\n"
        "gpucourse.claims.claim(\n    'a synchronized stopwatch times the work', seconds, "
        "device=device, at_least=0\n)"
    )
    sources = [
        setup,
        "import time\n\nimport torch\n\nstart = time.perf_counter()\n"
        "total = torch.ones(64, 64, device=device).sum().item()\n"
        "seconds = time.perf_counter() - start",
        check,
    ]
    cells = [
        {"cell_type": "code", "source": source, "metadata": {}, "outputs": []} for source in sources
    ]
    cells[-1]["metadata"] = {"tags": ["gpu-check"], "jupyter": {"source_hidden": True}}
    for cell in cells:
        cell["execution_count"] = None
    kernel = {"name": "python3", "display_name": "Python 3", "language": "python"}
    notebook = {
        "cells": cells,
        "metadata": {"kernelspec": kernel},
        "nbformat": 4,
        "nbformat_minor": 5,
    }
    (solutions / SMALLEST).mkdir()
    (solutions / SMALLEST / "smallest_lesson.ipynb").write_text(json.dumps(notebook, indent=1))


@pytest.mark.slow
@pytest.mark.ci_required  # PyPI answers in CI: a skip there fails
def test_a_stand_in_gpu_machine_runs_the_kit_offline_end_to_end(tmp_path):
    """A venv layered on an environment with PyTorch (no nbgrader in it) stands in for the GPU
    machine. The kit is made for what it has, installed with no index reachable, and the one command
    runs a lesson (the smallest: the course's set-up cell, a measurement, its GPU check) and the
    grading run's small assignment in a CPU rehearsal: the report says "not validated: no GPU" and
    lists the claims that would have run; autograde, from nbgrader without its user interface,
    graded; a budget too small for the lesson's grading leaves it out, saying so. A second run,
    killed mid-lesson, leaves a true report, and --report-only rebuilds it from what the run left.
    The base's torchvision probe, first, runs in the Python it checks."""
    base, facts = _stand_in_base()

    def ask(code):
        return subprocess.run([base, "-c", code], capture_output=True, text=True).stdout.strip()

    torch_version = ask("import importlib.metadata as m; print(m.version('torch'))")
    assert facts["torch"].split("+")[0] == torch_version.split("+")[0], (facts, torch_version)
    assert "torchvision" in facts or "error" in facts, facts
    assert preflight.probe_torchvision("/nonexistent/python")["error"].startswith(
        "the probe did not run"
    )
    why = _index_reachable(tmp_path)
    if why:
        pytest.skip(why)
    site, version = (
        ask("import sysconfig; print(sysconfig.get_paths()['purelib'])"),
        ask("import sys; print('%d.%d' % sys.version_info[:2])"),
    )
    machine = tmp_path / "gpu-machine"
    subprocess.run([base, "-m", "venv", "--without-pip", machine], check=True)
    python = machine / "bin" / "python"
    purelib = subprocess.run(
        [python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
    ).stdout.strip()
    (Path(purelib) / "zz-stand-in.pth").write_text(f"import site; site.addsitedir({site!r})\n")
    names = subprocess.run(
        [
            python,
            "-c",
            "import importlib.metadata as m\nfor d in m.distributions(): print(d.metadata['Name'])",
        ],
        capture_output=True,
        text=True,
    ).stdout
    assert "torch" in names.split() and "nbgrader" not in names.split(), (
        "a machine with PyTorch, no grader"
    )
    have = tmp_path / "have.txt"
    have.write_text(names)

    done = subprocess.run(
        [sys.executable, "-m", "coursetools.gpukit", "kit", tmp_path / "kit", "--have", have]
        + ["--python-version", version],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "sh kit/gpu-kit.sh" in done.stdout
    lesson = Path("solutions/01_verify_gpu/verify_gpu.ipynb")
    assert (tmp_path / "kit" / lesson).read_bytes() == (ROOT / lesson).read_bytes(), "the lessons"
    _smallest_lesson(tmp_path / "kit" / "solutions")
    artifacts = tmp_path / "gpu-run"
    done = subprocess.run(
        ["sh", tmp_path / "kit" / kit.SCRIPT, artifacts, "--rehearse", "--budget", "150", SMALLEST],
        capture_output=True,
        text=True,
        timeout=900,
        env=_offline_env(PYTHON=str(python), OMP_NUM_THREADS="1"),
    )
    output = done.stdout[-4000:] + done.stderr[-4000:]
    assert done.returncode == 0, output
    assert "--no-index --find-links wheels" in done.stdout and "nbgrader" in done.stdout, (
        "installed offline"
    )
    built = json.loads((artifacts / "gpu-report.json").read_text())
    markdown = (artifacts / "gpu-report.md").read_text()
    assert markdown.startswith("# GPU test report: REHEARSAL ON A CPU: not validated: no GPU"), (
        markdown[:500]
    )
    (row,) = built["notebooks"]
    assert row["result"] == "not validated" and row["failed_cells"] == [], row
    assert row["cells"] == 3, row
    assert row["would_check"] and "## Claims that would have been checked on a GPU" in markdown
    assert any("stopwatch" in claim for claim in row["would_check"]), row["would_check"]
    small = built["grading"]["grading the small assignment"]
    assert small["result"] == "passed" and small["passed"] == 1, (small, output)
    assert (
        built["status"] == "rehearsal"
        and (artifacts / "claims" / f"lesson-{SMALLEST}.jsonl").exists()
    )
    left_out = {s["id"]: s["why"] for s in built["steps"] if s["state"] == "left out"}
    assert "out of time" in left_out[f"grading {SMALLEST}"], left_out  # the budget left it out
    assert f"grading {SMALLEST}: not run: out of time" in markdown

    # A second run, killed mid-lesson as a job limit would kill it, has a true report all the same.
    killed = tmp_path / "killed"
    command = [python, "-m", "coursetools.gpurun", "--rehearse", "--artifacts", killed, SMALLEST]
    env = _offline_env(PYTHONPATH=str(tmp_path / "kit" / "tools"), OMP_NUM_THREADS="1")
    child = subprocess.Popen(command, cwd=tmp_path / "kit", env=env, start_new_session=True)
    try:
        _wait_for(lambda: '"state": "running"' in _text(killed / "run.json"), child)
    finally:
        os.killpg(child.pid, signal.SIGKILL)
        child.wait()
    report = _text(killed / "gpu-report.md")
    assert f"lesson {SMALLEST}: not finished: out of time (the run stopped during it)" in report
    assert "grading the small assignment: not run: out of time" in report, report
    assert "FAILED" not in report and "0 of 4 steps finished" in report, report
    rebuilt = subprocess.run(
        [python, "-m", "coursetools.gpurun", "--report-only", killed],
        cwd=tmp_path / "kit", env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert rebuilt.returncode == 0 and _text(killed / "gpu-report.md") == report, rebuilt.stderr


def _text(path: Path) -> str:
    return path.read_text(encoding="utf-8") if path.exists() else ""


def _wait_for(ready, child, seconds: float = 120) -> None:
    deadline = time.monotonic() + seconds
    while not ready():
        assert child.poll() is None and time.monotonic() < deadline, "the run never started a step"
        time.sleep(0.2)
