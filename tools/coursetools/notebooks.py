"""Regenerate the student notebooks in notebooks/ from solutions/ with nbgrader.

    python -m coursetools.notebooks                  # regenerate notebooks/ (make notebooks)
    python -m coursetools.notebooks --refresh-checked  # re-run solutions, store checked outputs

solutions/ is the single source of truth; notebooks/ is never edited by hand.
Generation runs `nbgrader generate_assignment` in a scratch copy of the
course and copies the results into notebooks/. A student notebook that has
changes of its own (a learner's answers) is saved to backups/ before it is
replaced: regeneration never loses what somebody typed.

--refresh-checked executes each solution notebook and stores the outputs of
the cells tagged `nbval-check-output` (and only those): they are what
`pytest --nbval-lax` compares.
"""

from __future__ import annotations

import argparse
import filecmp
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CHECKED = "nbval-check-output"


def lessons(root: Path = ROOT) -> list[str]:
    return sorted(p.parent.name for p in (root / "solutions").glob("*/*.ipynb"))


def copy_course(target: Path, root: Path = ROOT) -> Path:
    """A minimal copy of the course (nbgrader config + sources) to generate or grade in."""
    target.mkdir(parents=True, exist_ok=True)
    shutil.copy(root / "nbgrader_config.py", target)
    shutil.copytree(
        root / "solutions",
        target / "solutions",
        dirs_exist_ok=True,
        ignore=shutil.ignore_patterns(".ipynb_checkpoints", "__pycache__"),
    )
    return target


def venv_env() -> dict:
    """The environment with this Python's bin/ first on PATH (nbgrader runs `alembic` from
    there)."""
    env = dict(os.environ)
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    return env


def generate(course_dir: Path, only: list[str] | None = None) -> None:
    """Run ``nbgrader generate_assignment`` for the lessons inside ``course_dir``."""
    for lesson in only or lessons(course_dir):
        subprocess.run(
            [
                sys.executable,
                "-m",
                "nbgrader",
                "generate_assignment",
                lesson,
                "--force",
                "--log-level=WARN",
            ],
            cwd=course_dir,
            check=True,
            env=venv_env(),
        )


def _committed(path: Path) -> bytes | None:
    rel = path.relative_to(ROOT).as_posix()
    result = subprocess.run(["git", "show", f"HEAD:{rel}"], cwd=ROOT, capture_output=True)
    return result.stdout if result.returncode == 0 else None


def _edited(path: Path) -> bool:
    """True when ``path`` differs from its committed version (a file git does not know is not a
    learner's)."""
    committed = _committed(path)
    return committed is not None and path.read_bytes() != committed


def sync(generated: Path, target: Path) -> list[Path]:
    """Copy generated notebooks into ``target``, backing up any with changes of their own."""
    saved = []
    stamp = time.strftime("%Y%m%d-%H%M%S")
    for new in sorted(generated.rglob("*")):
        if not new.is_file():
            continue
        old = target / new.relative_to(generated)
        if old.exists() and not filecmp.cmp(old, new, shallow=False) and _edited(old):
            backup = ROOT / "backups" / stamp / old.relative_to(ROOT)
            backup.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(old, backup)
            saved.append(backup)
        old.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(new, old)
    return saved


def refresh_checked(notebook: Path) -> int:
    """Execute a solution and keep the outputs of its checked cells only."""
    import nbformat
    from nbclient import NotebookClient

    nb = nbformat.read(notebook, as_version=4)
    executed = nbformat.read(notebook, as_version=4)
    NotebookClient(
        executed,
        timeout=900,
        kernel_name="python3",
        resources={"metadata": {"path": str(notebook.parent)}},
    ).execute()
    kept = 0
    for cell, ran in zip(nb.cells, executed.cells, strict=True):
        if cell.cell_type != "code":
            continue
        checked = CHECKED in cell.metadata.get("tags", [])
        cell.outputs = ran.outputs if checked else []
        # nbval refuses a reference cell with outputs but no execution count.
        cell.execution_count = ran.execution_count if checked else None
        kept += checked
    nbformat.write(nb, notebook)
    return kept


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--refresh-checked", action="store_true", help="re-run solutions and store checked outputs"
    )
    parser.add_argument("lessons", nargs="*", help="only these lesson folders (default: all)")
    args = parser.parse_args(argv)
    chosen = args.lessons or lessons()
    if args.refresh_checked:
        for lesson in chosen:
            for notebook in sorted((ROOT / "solutions" / lesson).glob("*.ipynb")):
                print(
                    f"{notebook.relative_to(ROOT)}: {refresh_checked(notebook)} checked cell(s) "
                    "refreshed"
                )
    with tempfile.TemporaryDirectory(prefix="gpucourse-generate-") as scratch:
        course = copy_course(Path(scratch))
        generate(course, chosen)
        for lesson in chosen:
            for path in sync(course / "notebooks" / lesson, ROOT / "notebooks" / lesson):
                print(f"your edits were saved to {path.relative_to(ROOT)}")
    print(f"generated notebooks/ for {', '.join(chosen)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
