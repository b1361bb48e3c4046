"""Every solution notebook runs top to bottom under nbval, as `pytest --nbval-lax solutions` would.

Each notebook runs in its own pytest process, one test here per lesson, so a
notebook's cells always share one kernel while `make test` spreads lessons
over the xdist workers. Cells tagged `nbval-check-output` must reproduce
their stored outputs; every other cell must simply run.
"""

from __future__ import annotations

import os
import subprocess
import sys

import coursekit as ck
import pytest


@pytest.mark.slow
@pytest.mark.parametrize("lesson", ck.lessons())
def test_solution_runs_under_nbval(lesson):
    env = {**os.environ, "PYTHONWARNINGS": "default::DeprecationWarning,default::FutureWarning"}
    env.pop("GPUCOURSE_REQUIRE_GPU", None)
    notebook = ck.solution_path(lesson).relative_to(ck.ROOT)
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "--nbval-lax", "-p", "no:xdist", "-p", "no:cacheprovider", "-q", str(notebook)],
        cwd=ck.ROOT, env=env, capture_output=True, text=True,
    )
    assert result.returncode == 0, f"{notebook} fails under nbval:\n{result.stdout[-8000:]}\n{result.stderr[-2000:]}"
