"""Fair to slips: a test cell the learner deleted comes back where it was, and a right answer keeps its points.

nbgrader restores a deleted grade cell after the nearest nbgrader cell before it; a test that needs an ungraded cell
between its answer and itself (a %%writefile cell) would then run too early. tools/grade.py puts it back after the
cell it followed in the released notebook. Here: every test cell of every lesson, deleted all at once, goes back to
its place (fast, no kernel); and autograde gives the solution with every test cell deleted full marks, for lesson 01
here and for the other lessons inside test_grading's autograde run (its `deleted_tests` student).
"""

from __future__ import annotations

import coursekit as ck
from coursetools import grade
import nbformat
import pytest

LESSONS = ck.lessons()


def grade_id(cell) -> str | None:
    return cell.metadata.get("nbgrader", {}).get("grade_id")


def without_tests(nb):
    """A copy of ``nb`` with every test cell deleted, as a learner might."""
    tests = {grade_id(cell) for cell in ck.nbgrader_cells(nb, "test")}
    copy = nbformat.from_dict(nb)
    copy.cells = [cell for cell in copy.cells if grade_id(cell) not in tests]
    return copy, tests


@pytest.mark.parametrize("lesson", LESSONS)
def test_every_deleted_test_cell_goes_back_where_it_was(lesson):
    released = ck.read(ck.student_path(lesson))
    submitted, tests = without_tests(released)
    assert tests, f"{lesson} has no test cell"
    for cell in released.cells:  # in the released order, as RestoreCells does
        if grade_id(cell) in tests:
            submitted.cells.insert(grade.restore_position(released.cells, submitted.cells, grade_id(cell)), cell)
    assert [c.id for c in submitted.cells] == [c.id for c in released.cells], f"{lesson}: a test cell came back elsewhere"


def test_a_cell_is_found_by_its_source_when_its_id_changed():
    released = ck.read(ck.student_path("06_data_parallel"))
    submitted, _ = without_tests(released)
    for cell in submitted.cells:
        cell.id = f"new-{cell.id}"  # an editor that made new ids
    where = grade.restore_position(released.cells, submitted.cells, "test_average_gradients")
    assert submitted.cells[where - 1].source.startswith("%%writefile {workdir}/check_by_hand.py"), \
        "the test goes back after the %%writefile cell it needs, not after the answer"


def restored_after(graded, released) -> list[str]:
    """Test cells of ``graded`` whose cell before is not the one before them in ``released``."""
    before = {grade_id(c): released.cells[i - 1].id for i, c in enumerate(released.cells) if grade_id(c)}
    return [grade_id(c) for i, c in enumerate(graded.cells) if grade_id(c) in before and c.metadata["nbgrader"].get("grade")
            and not c.metadata["nbgrader"].get("solution") and graded.cells[i - 1].id != before[grade_id(c)]]


def deleted_tests_submission(lesson: str):
    """The solution's answers with every test cell deleted: it must still score full marks."""
    nb, _ = without_tests(ck.submission_from(ck.read(ck.student_path(lesson)), ck.solution_answers(lesson)))
    return nb


@pytest.mark.slow
def test_the_classroom_lesson_keeps_full_marks_with_its_test_cells_deleted(tmp_path, monkeypatch):
    """Lesson 01 is autograded in the classroom loop, not in test_grading: its deleted-cells run is here."""
    lesson = ck.CLASSROOM_LESSON
    monkeypatch.delenv("GPUCOURSE_REQUIRE_GPU", raising=False)
    course = ck.scratch_course(tmp_path, [lesson])
    path = ck.submit(course, "deleted_tests", lesson, deleted_tests_submission(lesson))
    before = path.read_bytes()
    result = ck.nbgrader(course, "autograde", lesson, "--force")
    assert result.returncode == 0, result.stdout + result.stderr
    problems = ck.autograde_problems(course, lesson, {"deleted_tests": (path, before, set())})
    graded = ck.read(course / "autograded" / "deleted_tests" / lesson / ck.solution_path(lesson).name)
    problems += [f"{cell} came back in the wrong place" for cell in restored_after(graded, ck.read(ck.student_path(lesson)))]
    assert not problems, "\n".join(problems)
