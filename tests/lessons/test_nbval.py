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
import shutil
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import coursekit as ck
import pytest
import tomllib
from packaging.requirements import Requirement


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


def _installed(name: str) -> str | None:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def unpacked_torch(wheel: Path) -> Path:
    """The wheel installed alone (`pip install --no-deps --target`) once, in
    test-artifacts/cpu-torch/, keyed by its name and size; later runs reuse it."""
    folder = ck.ROOT / "test-artifacts" / "cpu-torch" / f"{wheel.stem}-{wheel.stat().st_size}"
    if (folder / "torch" / "__init__.py").exists():
        return folder
    partial = folder.with_name(f"{folder.name}.{os.getpid()}")
    shutil.rmtree(partial, ignore_errors=True)
    install = subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-index", "--no-compile"]
        + ["--target", str(partial), str(wheel)],
        capture_output=True,
        text=True,
    )
    assert install.returncode == 0, install.stderr[-3000:]
    shutil.rmtree(folder, ignore_errors=True)
    partial.rename(folder)
    return folder


@pytest.mark.slow
def test_lesson_08_runs_on_a_pytorch_built_without_cuda():
    """Lesson 08 calls CUDA-only APIs (NVTX ranges, the sync debug mode) behind guards; on a build
    without CUDA, torch.cuda.nvtx.range raises, so an unguarded call would stop Run All there.
    That build goes first on this Python's path, in front of its own PyTorch; everything else is
    this environment's, at the course's pins, and must satisfy the build's requirements."""
    wheel = cpu_only_torch_wheel()
    if wheel is None:
        why = "no PyTorch wheel built without CUDA for this Python here"
        pytest.skip(f"{why} (set GPUCOURSE_CPU_TORCH_WHEEL)")
    folder = unpacked_torch(wheel)
    (info,) = folder.glob("torch-*.dist-info")
    unmet = [
        str(r)
        for r in map(Requirement, metadata.Distribution.at(info).requires or [])
        if (r.marker is None or r.marker.evaluate({"extra": ""}))
        and not r.specifier.contains(_installed(r.name) or "0.0.0a0", prereleases=True)
    ]
    assert not unmet, f"{wheel.name} needs what this environment lacks: {unmet}"
    course = tomllib.loads((ck.ROOT / "pyproject.toml").read_text())["project"][
        "optional-dependencies"
    ]["course"]
    wanted = {"numpy", "pillow", "matplotlib", "tqdm", "nvidia-ml-py", "ipykernel", "nbval"}
    wanted |= {"pytest", "nbformat", "nbclient"}
    pins = [pin for pin in course if pin.split("==")[0] in wanted]
    assert len(pins) == len(wanted) and all(
        _installed(pin.split("==")[0]) == pin.split("==")[1] for pin in pins
    ), "the kernel's other packages are the course's pins"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(folder), str(ck.ROOT / "utils")])}
    env.pop("GPUCOURSE_REQUIRE_GPU", None)
    built = subprocess.run(
        [sys.executable, "-c", "import torch; print(torch.version.cuda, torch.__file__)"],
        capture_output=True,
        text=True,
        env=env,
    )
    assert built.stdout.split() == ["None", str(folder / "torch" / "__init__.py")], (
        f"{wheel.name} is a CUDA build, or not the torch imported: {built.stdout}{built.stderr}"
    )
    notebook = ck.solution_path("08_profile_and_compile").relative_to(ck.ROOT)
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "--nbval-lax",
            "--nbval-current-env",
            "-p",
            "no:cacheprovider",
            "-p",
            "no:xdist",
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
