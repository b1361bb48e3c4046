"""Regenerate the student notebooks in notebooks/ from solutions/ with nbgrader.

    python -m coursetools.notebooks                  # regenerate notebooks/ (make notebooks)
    python -m coursetools.notebooks --refresh-checked  # re-run solutions, store checked outputs

solutions/ is the single source of truth; notebooks/ is never edited by hand.
Generation runs `nbgrader generate_assignment` in a scratch copy of the
course and copies the results into notebooks/. A student notebook about to
be replaced by a different one is first saved to backups/<time>/notebooks/...
(one line says where), unless git shows it is the committed copy, unedited:
in a ZIP download or a copied folder every such notebook is saved, so
regeneration never loses what somebody typed.

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

from coursetools.course import CHECKED, ROOT, lessons, solution_path, tags


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


def _committed_unedited(path: Path, root: Path) -> bool:
    """True only when git, asked in ``root``, shows ``path`` is tracked and byte for byte its
    committed version. No git, no checkout, an untracked or a changed file: False."""
    rel = path.relative_to(root).as_posix()
    try:
        # "HEAD:./rel" is the file's own path, also where root is a folder inside a checkout.
        shown = subprocess.run(
            ["git", "show", f"HEAD:./{rel}"], cwd=root, capture_output=True, timeout=60
        )
    except (OSError, subprocess.SubprocessError):
        return False
    return shown.returncode == 0 and path.read_bytes() == shown.stdout


def _backup(old: Path, root: Path, stamp: str) -> Path:
    """Copy ``old`` to backups/<stamp>/<its path in root>; an identical copy already there is
    reused, so running twice never piles up the same backup."""
    rel = old.relative_to(root)
    content = old.read_bytes()
    for earlier in sorted((root / "backups").glob(f"*/{rel.as_posix()}")):
        if earlier.is_file() and earlier.read_bytes() == content:
            return earlier
    folder, n = root / "backups" / stamp, 1
    while (folder / rel).exists():  # a backup made within the same second: never overwrite it
        folder, n = root / "backups" / f"{stamp}-{n}", n + 1
    backup = folder / rel
    backup.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy2(old, backup)
    return backup


def sync(generated: Path, target: Path, root: Path = ROOT) -> list[tuple[Path, Path]]:
    """Copy generated files into ``target`` (a folder inside ``root``). A file that differs from
    its replacement is first backed up in root/backups/, unless git shows it is the committed
    copy, unedited. Returns (file, its backup) pairs."""
    saved = []
    stamp = time.strftime("%Y%m%d-%H%M%S")
    for new in sorted(generated.rglob("*")):
        if not new.is_file():
            continue
        old = target / new.relative_to(generated)
        if (
            old.is_file()
            and not filecmp.cmp(old, new, shallow=False)
            and not _committed_unedited(old, root)
        ):
            saved.append((old, _backup(old, root, stamp)))
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
        checked = CHECKED in tags(cell)
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
        for notebook in map(solution_path, chosen):
            print(
                f"{notebook.relative_to(ROOT)}: {refresh_checked(notebook)} checked cell(s) "
                "refreshed"
            )
    with tempfile.TemporaryDirectory(prefix="gpucourse-generate-") as scratch:
        course = copy_course(Path(scratch))
        generate(course, chosen)
        for lesson in chosen:
            generated, target = course / "notebooks" / lesson, ROOT / "notebooks" / lesson
            for old, backup in sync(generated, target, root=ROOT):
                print(
                    f"{old.relative_to(ROOT)} differed from the new version: your copy is in "
                    f"{backup.relative_to(ROOT)}"
                )
    print(f"generated notebooks/ for {', '.join(chosen)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
