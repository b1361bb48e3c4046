"""Every solution notebook runs top to bottom under nbval, as `pytest --nbval-lax solutions` would.

Each notebook runs in its own pytest process, one test here per lesson, so a
notebook's cells always share one kernel while `make test` spreads lessons
over the xdist workers. Cells tagged `nbval-check-output` must reproduce
their stored outputs; every other cell must simply run. Each run keeps the
executed notebook in test-artifacts/executed/NN_topic.ipynb (the plugin
`coursetools.executed`): the reading edition (`make book`) is built from these.
"""

from __future__ import annotations

import os
import platform
import subprocess
import sys
from pathlib import Path

import coursekit as ck
import pytest
import tomllib


@pytest.mark.slow
@pytest.mark.parametrize("lesson", ck.lessons())
def test_solution_runs_under_nbval(lesson):
    env = {**os.environ, "PYTHONWARNINGS": "default::DeprecationWarning,default::FutureWarning"}
    env.pop("GPUCOURSE_REQUIRE_GPU", None)
    notebook = ck.solution_path(lesson).relative_to(ck.ROOT)
    executed = ck.ROOT / "test-artifacts" / "executed"
    (executed / f"{lesson}.ipynb").unlink(missing_ok=True)  # never a stale one from an earlier run
    keep = ["-p", "coursetools.executed", "--save-executed", str(executed)]  # for `make book`
    command = [sys.executable, "-m", "pytest", "--nbval-lax", "-q", str(notebook)]
    command += ["-p", "no:xdist", "-p", "no:cacheprovider", *keep]
    result = subprocess.run(
        command,
        cwd=ck.ROOT,
        env=env,
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, (
        f"{notebook} fails under nbval:\n{result.stdout[-8000:]}\n{result.stderr[-2000:]}"
    )
    kept = (executed / f"{lesson}.ipynb").exists()
    assert kept, f"the executed {lesson} was not kept for the book (coursetools.executed)"


def cpu_only_torch_wheel() -> Path | None:
    """A PyTorch wheel built without CUDA for this Python (as on macOS and Windows):
    $GPUCOURSE_CPU_TORCH_WHEEL, else one this machine keeps in /opt/wheels; PyPI's Linux wheels are
    all CUDA builds."""
    if named := os.environ.get("GPUCOURSE_CPU_TORCH_WHEEL"):
        return Path(named)
    tag = f"cp{sys.version_info.major}{sys.version_info.minor}"
    found = sorted(
        Path("/opt/wheels").glob(f"torch-*+cpu-{tag}-{tag}-*linux*_{platform.machine()}.whl")
    )
    return found[-1] if found else None


@pytest.mark.slow
def test_lesson_08_runs_on_a_pytorch_built_without_cuda(tmp_path):
    """Lesson 08 calls CUDA-only APIs (NVTX ranges, the sync debug mode) behind guards; on a build
    without CUDA, torch.cuda.nvtx.range raises, so an unguarded call would stop Run All there."""
    wheel = cpu_only_torch_wheel()
    if wheel is None:
        why = "no PyTorch wheel built without CUDA for this Python here"
        pytest.skip(f"{why} (set GPUCOURSE_CPU_TORCH_WHEEL)")
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    wanted = {
        "numpy",
        "pillow",
        "matplotlib",
        "tqdm",
        "nvidia-ml-py",
        "ipykernel",
        "nbval",
        "pytest",
        "nbformat",
        "nbclient",
    }
    course = tomllib.loads((ck.ROOT / "pyproject.toml").read_text())["project"][
        "optional-dependencies"
    ]["course"]
    pins = [pin for pin in course if pin.split("==")[0] in wanted]
    python = str(venv / "bin" / "python")
    install = subprocess.run(
        [python, "-m", "pip", "install", "-q", str(wheel), *pins], capture_output=True, text=True
    )
    assert install.returncode == 0, install.stderr[-3000:]
    built = subprocess.run(
        [python, "-c", "import torch; print(torch.version.cuda)"], capture_output=True, text=True
    )
    assert built.stdout.strip() == "None", (
        f"{wheel.name} is a CUDA build: {built.stdout}{built.stderr}"
    )
    env = {
        **os.environ,
        "PATH": f"{venv / 'bin'}{os.pathsep}{os.environ['PATH']}",
        "PYTHONPATH": str(ck.ROOT / "utils"),
    }
    env.pop("GPUCOURSE_REQUIRE_GPU", None)
    notebook = ck.solution_path("08_profile_and_compile").relative_to(ck.ROOT)
    result = subprocess.run(
        [
            python,
            "-m",
            "pytest",
            "--nbval-lax",
            "--nbval-current-env",
            "-p",
            "no:cacheprovider",
            "-q",
            str(notebook),
        ],
        cwd=ck.ROOT,
        env=env,
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, (
        f"{notebook} fails on {wheel.name}:\n{result.stdout[-8000:]}\n{result.stderr[-2000:]}"
    )
