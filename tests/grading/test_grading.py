"""The grading round trip, as an instructor runs it, in a scratch course.

- notebooks/ is exactly what nbgrader generates from solutions/ (checked in the scratch course the
  autograde run generates anyway);
- autograde: the solution, handed in with every test cell deleted, scores full marks (autograde
  restores each test cell from the source, after the cell it followed in the released notebook, so
  this one run is the solution's run as well as the deleted-tests one); the untouched student
  notebook scores zero without crashing the grader; every wrong-answer fixture loses exactly the
  points of the test cells of the answers it gets wrong, and every right-answer fixture
  (tests/fixtures/NN_topic/right_*.py) keeps full marks;
- no cell of a solution raises a DeprecationWarning or FutureWarning;
- lesson 09 (its locked cell measure_speedup): the class table over the course's gradebook
  (coursetools.grading.rows.class_rows, as `make grade` shows it) gives the solution's measured
  speed-up beside its full score, never in it.

`nbgrader validate` (the learner's Validate button) is run by alice in test_classroom.py; what it
asserts here (solutions pass, untouched notebooks fail every test) is what autograde's scores
already assert. Lesson 01 (ck.CLASSROOM_LESSON) is autograded there, with the same checks on the
same kinds of submission, so test_autograde leaves it out.
"""

from __future__ import annotations

import filecmp

import coursekit as ck
import gradingkit as gk
import pytest
from coursetools.grading import table
from coursetools.grading.rows import SPEEDUP_CELL, class_rows

LESSONS = ck.lessons()


def test_there_are_lessons():
    assert LESSONS, "solutions/ holds no lesson"


def _check_generated(course, lesson: str) -> None:
    """notebooks/ is exactly what nbgrader generates from solutions/ in the scratch ``course``."""
    generated = course / "notebooks" / lesson / ck.solution_path(lesson).name
    committed = ck.student_path(lesson)
    assert committed.exists(), f"{committed} is missing: run `make notebooks`"
    assert filecmp.cmp(generated, committed, shallow=False), (
        f"{committed.relative_to(ck.ROOT)} differs from what solutions/ generates: "
        "run `make notebooks` (notebooks/ is never edited by hand)"
    )


@pytest.mark.parametrize("lesson", LESSONS)
def test_every_exercise_has_wrong_answer_fixtures(lesson):
    """Each exercise is answered wrong in two wrong-answer fixtures (right_* ones do not count)."""
    exercises = ck.nbgrader_cells(ck.read(ck.solution_path(lesson)), "answer")
    answers = [c.metadata.nbgrader.grade_id for c in exercises]
    wrong = [grade_id for f in ck.fixtures(lesson) for grade_id in f.wrong]
    for grade_id in answers:
        assert wrong.count(grade_id) >= 2, (
            f"{lesson}: {grade_id!r} needs wrong answers in two fixtures"
        )
    named = {grade_id for f in ck.fixtures(lesson) for grade_id in f.answers}
    unknown = named - set(answers) - ck.locked_ids(lesson)
    assert not unknown, (
        f"fixtures of {lesson} name cells that are neither exercises nor locked: {unknown}"
    )


def _submission(lesson: str, name: str):
    """The submission called ``name`` and the answers it gets wrong (None: untouched, every test
    fails)."""
    student = ck.read(ck.student_path(lesson))
    if name == "untouched":
        return student, None
    if name == "solution":  # every test cell deleted: they come back where they were
        return gk.deleted_tests_submission(lesson), set()
    answers = ck.solution_answers(lesson)
    (fixture,) = [f for f in ck.fixtures(lesson) if f.name == name]
    return ck.submission_from(student, {**answers, **fixture.answers}), fixture.wrong


@pytest.mark.slow
@pytest.mark.parametrize("lesson", [lesson for lesson in LESSONS if lesson != ck.CLASSROOM_LESSON])
def test_autograde(lesson, tmp_path, monkeypatch):
    """One course, every submission of the lesson graded by one `nbgrader autograde` run, as in a
    class.

    The students are the solution with every test cell deleted (full marks, its tests back where
    they were, no warning), the untouched student notebook and each right- or wrong-answer fixture;
    a failure lists every submission that scored wrong.
    """
    monkeypatch.setenv("PYTHONWARNINGS", ck.WARNINGS_ON)
    course = ck.scratch_course(tmp_path, [lesson])
    _check_generated(course, lesson)
    names = ["solution", "untouched", *(f.name for f in ck.fixtures(lesson))]
    submitted = {}
    for name in names:
        nb, wrong = _submission(lesson, name)
        path = ck.submit(course, name, lesson, nb)
        submitted[name] = (path, path.read_bytes(), wrong)

    result = ck.nbgrader(course, "autograde", lesson, "--force")
    assert result.returncode == 0, result.stdout + result.stderr
    problems = ck.autograde_problems(course, lesson, submitted)
    notebook = ck.solution_path(lesson).name
    graded = ck.read(course / "autograded" / "solution" / lesson / notebook)
    released = ck.read(ck.student_path(lesson))
    moved = gk.restored_after(graded, released)
    problems += [f"solution: its deleted {cell} came back in the wrong place" for cell in moved]
    problems += ck.locked_problems(course, lesson, names)
    assert not problems, f"{lesson}:\n" + "\n".join(problems)
    warning = ck.cell_warning(course / "autograded" / "solution" / lesson / notebook)
    assert not warning, f"a solution cell warns: {warning}"
    if SPEEDUP_CELL in ck.locked_ids(lesson):
        _check_speedup(course, lesson)


def _check_speedup(course, lesson: str) -> None:
    """The class table shows the speed-up the solution measured here beside its score, never in
    it."""
    data = class_rows(course, lesson)
    (row,) = [r for r in data.rows if r.student == "solution"]
    assert row.score == row.max_score - row.waiting and not row.failed, f"the solution: {row}"
    assert (row.speedup or 0) > 0, "the class table shows the speed-up the solution measured"
    (line,) = [line for line in table.show(data).splitlines() if line.startswith("solution ")]
    assert f"{row.speedup:.2f}x" in line, line


def test_parallel_graders_wait_for_the_gradebook(tmp_path):
    """Graders run side by side share one SQLite gradebook: a write waits a minute for another
    instead of failing "database is locked"; a student left without a score is told why."""
    from coursetools.grading.config import GRADEBOOK_WAIT_S, gradebook_url
    from sqlalchemy import create_engine

    engine = create_engine(gradebook_url(tmp_path))
    _, connect = engine.dialect.create_connect_args(engine.url)
    assert connect["timeout"] == GRADEBOOK_WAIT_S and engine.url.database.startswith(str(tmp_path))
    locked = "sqlalchemy.exc.OperationalError: (sqlite3.OperationalError) database is locked"
    assert "--jobs 1" in table.why_failed(f"Traceback ...\n{locked}\n")
    assert table.why_failed("...\nRuntimeError: no kernel\n").endswith("RuntimeError: no kernel")
