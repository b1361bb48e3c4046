"""A pytest plugin: keep each notebook nbval ran, with the outputs of that run.

`pytest --nbval-lax -p coursetools.executed --save-executed DIR solutions/NN_topic/topic.ipynb`
writes DIR/NN_topic.ipynb: the source notebook with every code cell's outputs and execution count
as this run produced them, and `metadata.gpucourse_run` saying where and when it ran (the device,
the UTC time, the commit). `make test` runs each lesson this way once (tests/lessons/test_nbval.py);
`python -m coursetools.book` builds the reading edition from these files, without running a lesson
again. A cell that did not run (a failure before it, a skip) keeps no outputs.
"""

from __future__ import annotations

import copy
import datetime
import hashlib
import os
import platform
import shutil
import subprocess
from pathlib import Path

import nbformat

RUN_KEY = "gpucourse_run"


def pytest_addoption(parser):
    parser.addoption(
        "--save-executed",
        metavar="DIR",
        default=None,
        help="write each notebook nbval ran, with this run's outputs, to DIR/<lesson folder>.ipynb",
    )


def _cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _gpu_name() -> str | None:
    """The first GPU `nvidia-smi -L` lists, unless CUDA_VISIBLE_DEVICES hides them all."""
    if os.environ.get("CUDA_VISIBLE_DEVICES", "unset").strip() in ("", "-1"):
        return None
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return None
    try:
        listed = subprocess.run([smi, "-L"], capture_output=True, text=True, timeout=20).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    for line in listed.splitlines():
        if line.startswith("GPU "):
            return line.split(":", 1)[1].split("(UUID")[0].strip()
    return None


def _commit(root: Path) -> str | None:
    try:
        done = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            cwd=root,
            capture_output=True,
            text=True,
            timeout=20,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout.strip() or None


def run_stamp(root: Path) -> dict:
    """Where and when this run happens, as the book prints it on each page."""
    gpu = _gpu_name()
    cores = os.cpu_count() or 1
    return {
        "device": f"GPU: {gpu}" if gpu else f"CPU: {_cpu_name()}, {cores} cores",
        "kind": "gpu" if gpu else "cpu",
        "when": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "commit": _commit(root),
        "python": platform.python_version(),
    }


def source_digest(notebook) -> str:
    """A digest of a notebook's cell sources: the book tells an executed copy whose lesson changed
    since."""
    digest = hashlib.sha256()
    for cell in notebook.cells:
        digest.update(f"{cell.cell_type}\0{cell.source}\0".encode())
    return digest.hexdigest()[:16]


def executed_copy(notebook, items) -> nbformat.NotebookNode:
    """The notebook with each cell's outputs replaced by what its nbval item produced."""
    ran = {id(item.cell): item for item in items}
    result = copy.deepcopy(notebook)
    for original, cell in zip(notebook.cells, result.cells, strict=True):
        if cell.cell_type != "code":
            continue
        item = ran.get(id(original))
        outputs = getattr(item, "test_outputs", None) if item is not None else None
        cell.outputs = [nbformat.from_dict(dict(out)) for out in outputs or []]
        cell.execution_count = None
        for out in cell.outputs:
            if out.output_type == "execute_result":
                cell.execution_count = out.get("execution_count")
    return result


def pytest_sessionfinish(session):
    target = session.config.getoption("save_executed", None)
    if not target:
        return
    by_file: dict = {}
    for item in session.items:
        parent = getattr(item, "parent", None)
        if getattr(item, "test_outputs", None) is None and not hasattr(item, "cell"):
            continue
        if getattr(parent, "nb", None) is None:
            continue
        by_file.setdefault(parent, []).append(item)
    if not by_file:
        return
    out_dir = Path(target)
    out_dir.mkdir(parents=True, exist_ok=True)
    stamp = run_stamp(Path(str(session.config.rootpath)))
    for parent, items in by_file.items():
        path = Path(str(parent.fspath))
        executed = executed_copy(parent.nb, items)
        executed.metadata[RUN_KEY] = {
            **stamp,
            "source": path.name,
            "source_digest": source_digest(parent.nb),
        }
        target_file = out_dir / f"{path.parent.name}.ipynb"
        partial = target_file.with_suffix(".ipynb.partial")
        nbformat.write(executed, str(partial))
        os.replace(partial, target_file)  # a reader never sees half a notebook
