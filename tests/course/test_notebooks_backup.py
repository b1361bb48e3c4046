"""`make notebooks` never loses what a learner typed: a notebook about to be replaced by a different
one is first saved in backups/, unless git shows it is the committed copy, unedited. Small
synthetic notebooks in a scratch folder; no nbgrader run."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
from coursetools import notebooks

LESSON = "01_demo"
GENERATED = b'{"cells": [], "note": "generated"}\n'
OLD = b'{"cells": [], "note": "the version committed earlier"}\n'
ANSWERS = b'{"cells": [], "note": "a learner\'s answers"}\n'


@pytest.fixture(autouse=True)
def git_of_its_own(monkeypatch):
    """git answers about the scratch folder only, not a repository named by the caller's shell."""
    for name in ("GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE", "GIT_CEILING_DIRECTORIES"):
        monkeypatch.delenv(name, raising=False)


def course(root: Path, student: bytes) -> tuple[Path, Path]:
    """A course in ``root`` with one student notebook, and a generated folder beside it."""
    student_nb = root / "notebooks" / LESSON / "demo.ipynb"
    student_nb.parent.mkdir(parents=True)
    student_nb.write_bytes(student)
    generated = root.parent / f"{root.name}-generated" / LESSON
    generated.mkdir(parents=True)
    (generated / "demo.ipynb").write_bytes(GENERATED)
    return student_nb, generated


def regenerate(root: Path, generated: Path) -> list[tuple[Path, Path]]:
    return notebooks.sync(generated, root / "notebooks" / LESSON, root=root)


def git(root: Path, *args: str) -> None:
    subprocess.run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-c", "commit.gpgsign=false", *args],
        cwd=root,
        check=True,
        capture_output=True,
    )


def checkout(root: Path, tracked: str = "notebooks") -> None:
    git(root, "init", "-q")
    git(root, "add", tracked)
    git(root, "commit", "-q", "-m", "course")


def test_outside_git_an_edited_notebook_is_backed_up_and_the_message_names_it(
    tmp_path, monkeypatch, capsys
):
    root = tmp_path / "course-main"  # a ZIP download: no .git in it, none looked for above
    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(tmp_path))
    student_nb, generated = course(root, ANSWERS)

    monkeypatch.setattr(notebooks, "ROOT", root)
    monkeypatch.setattr(notebooks, "copy_course", lambda target: target)
    monkeypatch.setattr(
        notebooks,
        "generate",
        lambda course_dir, only: shutil.copytree(generated, course_dir / "notebooks" / LESSON),
    )
    assert notebooks.main([LESSON]) == 0

    assert student_nb.read_bytes() == GENERATED
    (backup,) = (root / "backups").glob(f"*/notebooks/{LESSON}/demo.ipynb")
    assert backup.read_bytes() == ANSWERS
    out = capsys.readouterr().out
    assert f"your copy is in {backup.relative_to(root)}" in out
    assert f"notebooks/{LESSON}/demo.ipynb differed" in out


def test_twice_the_same_regeneration_makes_one_backup(tmp_path):
    root = tmp_path / "course"
    student_nb, generated = course(root, ANSWERS)
    ((_, backup),) = regenerate(root, generated)
    assert regenerate(root, generated) == []
    # The learner's same answers again (say, copied back in): the earlier backup already holds them.
    student_nb.write_bytes(ANSWERS)
    assert regenerate(root, generated) == [(student_nb, backup)]
    assert len(list((root / "backups").rglob("*.ipynb"))) == 1


def test_a_second_backup_within_the_same_second_keeps_the_first(tmp_path, monkeypatch):
    monkeypatch.setattr(notebooks.time, "strftime", lambda fmt: "20250101-120000")
    root = tmp_path / "course"
    student_nb, generated = course(root, ANSWERS)
    ((_, first),) = regenerate(root, generated)
    student_nb.write_bytes(ANSWERS + b"more\n")
    ((_, second),) = regenerate(root, generated)
    assert first != second
    assert first.read_bytes() == ANSWERS
    assert second.read_bytes() == ANSWERS + b"more\n"


needs_git = pytest.mark.skipif(shutil.which("git") is None, reason="needs git")


@needs_git
def test_a_checkout_without_git_on_path_backs_up_even_the_committed_copy(tmp_path, monkeypatch):
    root = tmp_path / "course"
    _, generated = course(root, OLD)
    checkout(root)
    monkeypatch.setenv("PATH", str(tmp_path / "no-such-bin"))
    ((_, backup),) = regenerate(root, generated)
    assert backup.read_bytes() == OLD


@needs_git
def test_in_a_checkout_the_committed_unedited_notebook_is_replaced_without_backup(tmp_path):
    root = tmp_path / "course"
    student_nb, generated = course(root, OLD)
    checkout(root)
    assert regenerate(root, generated) == []
    assert student_nb.read_bytes() == GENERATED
    assert not (root / "backups").exists()


@needs_git
def test_in_a_checkout_a_changed_tracked_notebook_is_backed_up(tmp_path):
    root = tmp_path / "course"
    student_nb, generated = course(root, OLD)
    checkout(root)
    student_nb.write_bytes(ANSWERS)
    ((old, backup),) = regenerate(root, generated)
    assert old == student_nb
    assert backup.read_bytes() == ANSWERS
    assert student_nb.read_bytes() == GENERATED


@needs_git
def test_in_a_checkout_an_untracked_notebook_is_backed_up(tmp_path):
    root = tmp_path / "course"
    student_nb, generated = course(root, ANSWERS)
    (root / "README.md").write_text("course\n")
    checkout(root, tracked="README.md")
    ((_, backup),) = regenerate(root, generated)
    assert backup.read_bytes() == ANSWERS


@needs_git
def test_a_course_folder_inside_another_checkout_compares_its_own_files(tmp_path):
    """The course as a subfolder of a bigger repository: the path git compares is the file's."""
    outer = tmp_path / "outer"
    root = outer / "course"
    root.mkdir(parents=True)
    student_nb, generated = course(root, OLD)
    checkout(outer, tracked="course/notebooks")
    assert regenerate(root, generated) == []
    student_nb.write_bytes(ANSWERS)
    generated.joinpath("demo.ipynb").write_bytes(GENERATED + b"\n")
    ((_, backup),) = regenerate(root, generated)
    assert backup.read_bytes() == ANSWERS
