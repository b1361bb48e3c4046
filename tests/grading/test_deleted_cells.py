"""Fair to slips: a test cell or a read-only code cell the learner deleted comes back where it was,
and a right answer keeps its points.

nbgrader restores a deleted grade cell after the nearest nbgrader cell before it; a test that needs
an ungraded cell between its answer and itself (a %%writefile cell) would then run too early. The
grader (coursetools.grading.cells.RestoreCells) puts it back after the cell it followed in the
released notebook. Here: every test cell of every lesson, deleted all at once, goes back to its
place (fast, no kernel); and autograde gives the solution with every test cell deleted full marks,
its tests back in their places: test_grading's autograde run hands in every lesson's solution that
way, and test_classroom's class hands in lesson 01's right_other_ways that way.
"""

from __future__ import annotations

import coursekit as ck
import gradingkit as gk
import pytest
from coursetools.grading.cells import grade_id, restore_position

LESSONS = ck.lessons()


@pytest.mark.parametrize("lesson", LESSONS)
def test_deleted_tests_go_back(lesson):
    """Every deleted test cell and read-only code cell of ``lesson`` goes back where it was in the
    released notebook."""
    released = ck.read(ck.student_path(lesson))
    submitted, gone = gk.without_tests(released, read_only=True)
    assert gone, f"{lesson} has no test cell"
    for cell in released.cells:  # in the released order, as RestoreCells does
        if grade_id(cell) in gone:
            submitted.cells.insert(
                restore_position(released.cells, submitted.cells, grade_id(cell)), cell
            )
    ids = [c.id for c in submitted.cells]
    assert ids == [c.id for c in released.cells], f"{lesson}: a test cell came back elsewhere"


def test_found_by_source_when_ids_change():
    """A cell is found by its source when an editor gave every cell a new id."""
    released = ck.read(ck.student_path("06_data_parallel"))
    submitted, _ = gk.without_tests(released)
    for cell in submitted.cells:
        cell.id = f"new-{cell.id}"
    where = restore_position(released.cells, submitted.cells, "test_average_gradients")
    assert submitted.cells[where - 1].source.startswith("%%writefile {workdir}/check_by_hand.py"), (
        "the test goes back after the %%writefile cell it needs, not after the answer"
    )
