"""The Colab set: every lesson runs on Colab's versions, with gpucourse installed the way Colab's
set-up cell does it.

`make test` first builds .venv-colab (coursetools.colab_set): colab/requirements.txt, which `make
pins` derives from Colab's own package list (colab/pip-freeze.gpu.txt), then gpucourse from this
repository as a local git URL, installed by the lessons' set-up cells themselves, run for real on a
stand-in Colab. Here:

- each solution runs under ``pytest --nbval-lax`` in that environment's Python, one test per lesson,
  so the lessons spread over the xdist workers beside the rest of the suite;
- the set-up cells' run is checked: each ran, installed gpucourse from the git URL (not the
  checkout's folder), at the checkout's commit, and said on the stand-in Colab without a GPU how to
  attach one;
- the doctor, run there as on Colab, points at no fix that only applies to the course's own `.venv`.

Outside `make`, these tests skip while .venv-colab is absent (`python -m coursetools.colab_set`
builds it).
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import coursekit as ck
import pytest
from coursetools import colab_set, pins, release

VENV = Path(os.environ.get("GPUCOURSE_COLAB_VENV") or ck.ROOT / ".venv-colab")
PYTHON = VENV / "bin" / "python"


def missing() -> str:
    """Why the Colab set's environment cannot be tested here ('' when it can): absent, or built from
    other requirements than colab/'s (`make test-fast` does not rebuild it; `make test` always does
    first)."""
    if not PYTHON.exists():
        return f"the Colab set's environment {VENV} is absent"
    stamp = VENV / colab_set.STAMP
    if not stamp.exists() or stamp.read_text().strip() != colab_set.inputs_hash(str(PYTHON)):
        return f"the Colab set's environment {VENV} was built from other requirements than colab/'s"
    return ""


WHY = missing()
needs_env = pytest.mark.skipif(
    bool(WHY), reason=f"{WHY}: `make test` builds it (or `python -m coursetools.colab_set`)"
)


def colab_env() -> dict[str, str]:
    # No PYTHONWARNINGS, as on Colab: there Colab's own jupyter_client 7.4 warns of utcnow() on
    # Python 3.13 in the kernel, which would land in whichever cell runs then
    # (tests/lessons/test_nbval.py shows the lessons' deprecations).
    drop = {"GPUCOURSE_REQUIRE_GPU", "PYTHONPATH", "VIRTUAL_ENV", "PYTHONWARNINGS"}
    env = {k: v for k, v in os.environ.items() if k not in drop}
    # torchrun and friends are the Colab set's
    env["PATH"] = f"{VENV / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    return env


@pytest.mark.slow
@needs_env
@pytest.mark.parametrize("lesson", ck.lessons())
def test_solution_runs_under_nbval_in_the_colab_set(lesson):
    # At the learner's sizes, as in tests/lessons/test_nbval.py: the grader's (NBGRADER_EXECUTION)
    # cut under a tenth of this run's CPU time (measured for every lesson: its time is the kernel,
    # PyTorch's and TensorFlow's imports and the demos' subprocesses, which no workload shrinks).
    notebook = ck.solution_path(lesson).relative_to(ck.ROOT)
    result = subprocess.run(
        [
            str(PYTHON),
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
        env=colab_env(),
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, (
        f"{notebook} fails on Colab's versions ({VENV.name}):\n{result.stdout[-8000:]}\n"
        f"{result.stderr[-2000:]}"
    )


@pytest.mark.slow
@needs_env
def test_the_cuda_rehearsal_holds_on_colabs_pytorch():
    """The rehearsal's model (tests/unit/test_rehearsal.py) on Colab's PyTorch and Python, the
    gpucourse there being the one its set-up cells installed."""
    tests = ck.ROOT / "tests"
    env = colab_env() | {"PYTHONPATH": f"{ck.ROOT / 'tools'}{os.pathsep}{tests}"}
    command = [str(PYTHON), "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist"]
    command += [str(tests / "unit" / "test_rehearsal.py")]
    result = subprocess.run(command, cwd=ck.ROOT, env=env, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout[-6000:] + result.stderr[-2000:]


def test_what_the_set_up_cells_add_on_colab_is_in_the_colab_set():
    """A set-up cell may add a package on Colab (lesson 05: DALI); the Colab set has it at the
    version the cell names."""
    import re

    wanted = {pins.package_name(pin): pin.split(";")[0].strip() for pin in pins.colab_pins()}
    for source, lessons in colab_set.setup_cells().items():
        added = re.findall(r'"([A-Za-z0-9_.-]+==[^"]+)"', source)
        for requirement in added:
            assert wanted.get(pins.package_name(requirement)) == requirement, (
                f"the set-up cell of {lessons} installs {requirement}; colab/requirements.txt has "
                f"{wanted.get(pins.package_name(requirement))}"
            )


def installed(code: str) -> str:
    result = subprocess.run(
        [str(PYTHON), "-c", code], capture_output=True, text=True, env=colab_env(), cwd=VENV
    )
    assert result.returncode == 0, result.stderr
    return result.stdout


@needs_env
def test_the_colab_set_has_colabs_versions():
    code = (
        "import importlib.metadata as m, json, sys; print(json.dumps({'python': '%d.%d' % "
        "sys.version_info[:2], **{n: m.version(n) for n in sys.argv[1:]}}))"
    )
    names = pins.LESSON_LIBRARIES + pins.COLAB_KERNEL
    result = subprocess.run(
        [str(PYTHON), "-c", code, *names], capture_output=True, text=True, env=colab_env()
    )
    versions, colab = json.loads(result.stdout), pins.freeze()
    for name in names:
        assert versions[name] == pins.public(colab[pins.package_name(name)]), (
            f"{name}: make test rebuilds it"
        )


@needs_env
def test_the_set_up_cells_installed_gpucourse_from_the_repository_as_on_colab():
    record = json.loads((VENV / colab_set.RECORD).read_text())
    assert {lesson for cell in record["cells"] for lesson in cell["lessons"]} == set(ck.lessons())
    for cell in record["cells"]:
        assert cell["returncode"] == 0, (
            f"the set-up cell of {cell['lessons']} failed on the stand-in Colab:\n{cell['output']}"
        )
        assert cell["device"] == "cpu" and "Runtime > Change runtime type" in cell["output"], cell[
            "output"
        ]
    origin = json.loads(
        installed(
            "import importlib.metadata as m; print(m.distribution('gpucourse').read_text("
            "'direct_url.json'))"
        )
    )
    # from a scratch clone of this checkout, its last commit tagged (colab_set.tagged_clone)
    assert origin["url"].startswith("file://") and origin["vcs_info"]["vcs"] == "git", (
        f"not from the git URL: {origin}"
    )
    tag = f"v{release.version()}"
    assert origin["vcs_info"].get("requested_revision") == tag, (
        f"the set-up cells install the helper's release {tag}: {origin['vcs_info']}"
    )
    assert "dir_info" not in origin, (
        "gpucourse must be installed from the repository, not from the checkout's folder"
    )
    where = Path(installed("import gpucourse; print(gpucourse.__file__)").strip())
    assert VENV in where.parents and ck.ROOT / "utils" not in where.parents
    commit = origin["vcs_info"]["commit_id"]
    assert commit == record["commit"], "gpucourse was installed apart from the set-up cells' run"
    ours = subprocess.run(
        ["git", "merge-base", "--is-ancestor", commit, "HEAD"], cwd=ck.ROOT, capture_output=True
    )
    assert ours.returncode == 0, (
        f"gpucourse is from commit {commit}, not in this checkout's history: `make test` "
        "reinstalls it"
    )


@pytest.mark.slow
@needs_env
def test_the_doctor_on_colab_points_at_no_fix_for_the_course_venv():
    """On Colab there is no `.venv` and no `make`: the doctor must not send learners there."""
    driver = colab_set.FAKE_COLAB + "from gpucourse.__main__ import main; main(['doctor'])"
    result = subprocess.run(
        [str(PYTHON), "-c", driver],
        capture_output=True,
        text=True,
        env=colab_env(),
        cwd=VENV,
        timeout=300,
    )
    report = result.stdout + result.stderr
    assert "(Colab)" in report, report
    for line in report.splitlines():
        assert "make lab" not in line and "rm -rf .venv" not in line, (
            f"a `.venv` fix on Colab: {line}\n\n{report}"
        )
