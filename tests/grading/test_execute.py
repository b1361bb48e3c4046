"""What the grader runs: cells tagged `demo` or `gpu-check` are skipped, locked cells run as the
source has them.

One `nbgrader autograde` run (the course's nbgrader_config.py) of a small assignment whose demo and
GPU-check cells raise if they run, with a locked referee cell its test relies on and lesson 09's
locked measurement cell:

    right          the answer right, nothing else touched edited         the answer right; the
    referee and the measurement cell edited, a fake ratio printed by a
                   cell of its own: graded, and ranked, as if unedited
    tagged_test    a wrong answer whose test cell the learner tagged `demo`: the test still runs and
    fails
"""

from __future__ import annotations

import coursekit as ck
import pytest
from coursetools.course import SKIPPED_TAGS
from coursetools.grading.execute import skipped
from coursetools.grading.rows import SPEEDUP_CELL, class_rows
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

MEASURED = 'print(f"fast_train speed-up over the baseline: {1.5:.2f}x on cpu")'


def _cell(source: str, tags=(), **nbgrader):
    cell = new_code_cell(source)
    if tags:
        cell.metadata.tags = list(tags)
    if nbgrader:
        cell.metadata.nbgrader = {
            "grade": False,
            "solution": False,
            "locked": False,
            "schema_version": 3,
        }
        cell.metadata.nbgrader.update(nbgrader)
    return cell


def _source():
    nb = new_notebook(
        cells=[
            new_markdown_cell("# Demo cells and a locked referee"),
            _cell("ran = []"),
            _cell('ran.append("demo")\nraise RuntimeError("a demo cell ran")', ["demo"]),
            _cell('ran.append("gpu-check")\nraise RuntimeError("a GPU check ran")', ["gpu-check"]),
            _cell('ran.append("plain")'),
            _cell('def referee():\n    return "source"', locked=True, grade_id="referee"),
            _cell(
                "def answer():\n    ### BEGIN SOLUTION\n    return 42\n    ### END SOLUTION",
                solution=True,
                grade_id="answer",
            ),
            _cell(
                'assert answer() == 42\nassert referee() == "source"\nassert ran == ["plain"], ran',
                grade=True,
                locked=True,
                points=1,
                grade_id="test_answer",
            ),
            _cell(MEASURED, locked=True, grade_id=SPEEDUP_CELL),
        ]
    )
    nb.metadata.kernelspec = {"name": "python3", "display_name": "Python 3", "language": "python"}
    return nb


def _by_id(nb, grade_id):
    (cell,) = [c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade_id") == grade_id]
    return cell


def _submissions(released):
    right = {"answer": "def answer():\n    return 42"}
    edited = ck.submission_from(released, right)
    _by_id(edited, "referee").source = 'def referee():\n    return "edited"'
    _by_id(edited, SPEEDUP_CELL).source = 'print("fast_train speed-up over the baseline: 99.00x")'
    edited.cells.append(new_code_cell('print("fast_train speed-up over the baseline: 50.00x")'))
    tagged = ck.submission_from(released, {"answer": "def answer():\n    return 41"})
    _by_id(tagged, "test_answer").metadata.tags = ["demo"]
    return {"edited": edited, "tagged_test": tagged}


def test_skipped_cells():
    """Only code cells tagged so, and never an nbgrader cell."""
    assert SKIPPED_TAGS == ("demo", "gpu-check")
    assert skipped(_cell("x", ["demo"])) and skipped(_cell("x", ["gpu-check", "other"]))
    assert not skipped(_cell("x")) and not skipped(_cell("x", ["nbval-check-output"]))
    assert not skipped(_cell("x", ["demo"], grade=True, points=1, grade_id="t")), (
        "a test cell always runs"
    )
    assert not skipped(_cell("x", ["demo"], solution=True, grade_id="a")), "an answer always runs"
    assert not skipped(_cell("x", ["demo"], locked=True, grade_id="r")), "a locked cell always runs"
    markdown = new_markdown_cell("x")
    markdown.metadata.tags = ["demo"]
    assert not skipped(markdown)


@pytest.mark.slow
def test_demo_cells_and_locked_cells(tmp_path):
    """One autograde run: tagged cells skipped, locked cells restored, a learner's tag ignored."""
    course = ck.sandbox_course(tmp_path, _source())
    released = ck.read(course / "release" / ck.SANDBOX_ASSIGNMENT / ck.SANDBOX_NAME)
    for student, nb in _submissions(released).items():
        ck.submit_as(course, student, ck.SANDBOX_ASSIGNMENT, ck.SANDBOX_NAME, nb)
    result = ck.nbgrader(course, "autograde", ck.SANDBOX_ASSIGNMENT, "--force")
    assert result.returncode == 0, result.stdout + result.stderr

    def score(student):
        scores = ck.scores_of(course, ck.SANDBOX_ASSIGNMENT, ck.SANDBOX_NAME, student)
        return scores["test_answer"][0]

    # edited: its test passes only if the plain cell ran, the demo and GPU-check cells did not, and
    # the referee came back as the source has it
    assert score("edited") == 1
    graded = ck.read(course / "autograded" / "edited" / ck.SANDBOX_ASSIGNMENT / ck.SANDBOX_NAME)
    demo, check = graded.cells[2], graded.cells[3]
    assert (demo.outputs, check.outputs, demo.execution_count) == ([], [], None), (
        "not run, no output"
    )
    assert graded.cells[4].execution_count is not None, "the untagged cell ran"
    # tagged_test: a learner's tag does not skip a test cell
    assert score("tagged_test") == 0
    rows = {row.student: row for row in class_rows(course, ck.SANDBOX_ASSIGNMENT).rows}
    speedups = {s: r.speedup for s, r in rows.items()}
    assert speedups == {"edited": 1.5, "tagged_test": 1.5}, "the locked cell's own measurement"
    assert rows["tagged_test"].failed == ["test_answer"]
    # the learner's Validate button (in the course, its nbgrader_config.py loaded) skips them too
    right = ck.submission_from(released, {"answer": "def answer():\n    return 42"})
    path = ck.submit_as(course, "validated", ck.SANDBOX_ASSIGNMENT, ck.SANDBOX_NAME, right)
    said = ck.nbgrader(course, "validate", str(path), check=False).stdout
    assert "Success! Your notebook passes all the tests." in said, said
