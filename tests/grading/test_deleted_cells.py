"""Fair to slips: a test cell the learner deleted comes back where it was, and a right answer keeps
its points.

nbgrader restores a deleted grade cell after the nearest nbgrader cell before it; a test that needs
an ungraded cell between its answer and itself (a %%writefile cell) would then run too early. The
grader (coursetools.grading.cells.RestoreCells) puts it back after the cell it followed in the
released notebook. Here: every test cell of every lesson, deleted all at once, goes back to its
place (fast, no kernel); and autograde gives the solution with every test cell deleted full marks,
for lesson 01 here and for the other lessons inside test_grading's autograde run (its
`deleted_tests` student).
"""

from __future__ import annotations

import coursekit as ck
import gradingkit as gk
import pytest
from coursetools.grading.cells import grade_id, restore_position

LESSONS = ck.lessons()


@pytest.mark.parametrize("lesson", LESSONS)
def test_deleted_tests_go_back(lesson):
    """Every deleted test cell of ``lesson`` goes back where it was in the released notebook."""
    released = ck.read(ck.student_path(lesson))
    submitted, tests = gk.without_tests(released)
    assert tests, f"{lesson} has no test cell"
    for cell in released.cells:  # in the released order, as RestoreCells does
        if grade_id(cell) in tests:
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


@pytest.mark.slow
def test_classroom_lesson_deleted_tests(tmp_path):
    """Lesson 01 with every test cell deleted keeps full marks (it is autograded in the classroom
    loop, not in test_grading, so its deleted-cells run is here)."""
    lesson = ck.CLASSROOM_LESSON
    course = ck.scratch_course(tmp_path, [lesson])
    path = ck.submit(course, "deleted_tests", lesson, gk.deleted_tests_submission(lesson))
    before = path.read_bytes()
    result = ck.nbgrader(course, "autograde", lesson, "--force")
    assert result.returncode == 0, result.stdout + result.stderr
    problems = ck.autograde_problems(course, lesson, {"deleted_tests": (path, before, set())})
    name = ck.solution_path(lesson).name
    graded = ck.read(course / "autograded" / "deleted_tests" / lesson / name)
    released = ck.read(ck.student_path(lesson))
    problems += [
        f"{cell} came back in the wrong place" for cell in gk.restored_after(graded, released)
    ]
    assert not problems, "\n".join(problems)
