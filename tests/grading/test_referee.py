"""An answer cell that rebinds what a test judges with is flagged (coursetools.grading.referee), and
no right or wrong answer of any lesson is: the flag is the instructor's lead and never cries wolf.

The gaming fixtures in tests/fixtures/<lesson>/flagged/ patch lesson 09's referee from an answer
cell, one mechanism each; the class table and the class report show their flags. No kernel runs."""

from __future__ import annotations

import coursekit as ck
import pytest
from coursetools.grading import referee, report, rows, table
from nbformat.v4 import new_code_cell, new_notebook

LESSON = "09_make_it_fast"
FLAGGED = {  # fixture -> what its flags must name
    "patches_watch": ["fast_epoch line 1: changes Watch._read"],
    "patches_torch": [
        "fast_epoch line 1: changes torch.Tensor.item",
        "fast_epoch line 2: changes torch.cuda.synchronize",
    ],
    "patches_by_mock": ["fast_epoch line 3: changes Watch._read"],
    "rebinds_warnings": ["fast_epoch line 3: rebinds warnings (it names warnings)"],
}


def _submissions(lesson: str):
    student, answers = ck.read(ck.student_path(lesson)), ck.solution_answers(lesson)
    yield "solution", ck.submission_from(student, answers)
    for f in ck.fixtures(lesson) + ck.fixtures(lesson, cuda=True):
        yield f.name, ck.submission_from(student, {**answers, **f.answers})


def test_no_answer_of_any_lesson_is_flagged():
    """Every solution and every right or wrong fixture, on the CPU and the CUDA path: no flag."""
    flagged = {
        (lesson, name): found
        for lesson in ck.lessons()
        for name, nb in _submissions(lesson)
        if (found := referee.flags(nb))
    }
    assert not flagged


def test_each_gaming_fixture_is_flagged():
    student, answers = ck.read(ck.student_path(LESSON)), ck.solution_answers(LESSON)
    found = {
        f.name: referee.flags(ck.submission_from(student, {**answers, **f.answers}))
        for f in ck.fixtures(LESSON, flagged=True)
    }
    assert found == FLAGGED


def _notebook(*cells: tuple[str, str]):
    """A notebook of (kind, source) cells: "locked" (a read-only cell) or "answer"."""
    nb = new_notebook()
    for i, (kind, source) in enumerate(cells):
        cell = new_code_cell(source)
        meta = {"locked": True} if kind == "locked" else {"solution": True}
        cell.metadata.nbgrader = {**meta, "grade": False, "grade_id": f"c{i}"}
        nb.cells.append(cell)
    return nb


REFEREE = (
    "locked",
    "import sys, time\nimport numpy as np\nimport torch\n\n"
    "def judge(x):\n    return time.perf_counter()\n\nclass Spy:\n    pass",
)


@pytest.mark.parametrize(
    "answer, flagged",
    [
        ("torch.backends.cudnn.benchmark = True", []),  # a setting the lessons teach
        ("def judge_mine(x):\n    judge = 1\n    return judge", []),  # a local name
        ("%%time\njudge = lambda x: 0", ["c1 line 2: rebinds judge"]),
        ("%%writefile script.py\nimport sys\nsys.exit = None", []),  # another process's code
        ("Spy.__dict__['x'] = 1", ["c1 line 1: changes Spy.__dict__"]),
        ("sys.modules['torch'] = None", ["c1 line 1: changes sys.modules[...]"]),
        ("np = None", ["c1 line 1: rebinds np (it names numpy)"]),
        (
            "import unittest.mock\nunittest.mock.patch('time.perf_counter').start()",
            ["c1 line 2: changes time.perf_counter"],
        ),
        ("del time.sleep", ["c1 line 1: changes time.sleep"]),
        ("class Spy:\n    pass", ["c1 line 1: defines Spy again"]),
        ("from os import path as judge", ["c1 line 1: imports over judge"]),
    ],
)
def test_the_rules(answer, flagged):
    assert referee.flags(_notebook(REFEREE, ("answer", answer))) == flagged


def test_a_name_defined_later_is_no_referee():
    """A learner's helper named like a read-only cell's later function rebinds nothing yet."""
    nb = _notebook(("answer", "def judge(x):\n    return 0"), REFEREE)
    assert referee.flags(nb) == []


def test_the_class_table_and_report_show_the_flags(tmp_path):
    """A flagged submission, before or after autograde: its row, the table and the report say so."""
    course = tmp_path / "course"
    student, answers = ck.read(ck.student_path(LESSON)), ck.solution_answers(LESSON)
    gaming = next(f for f in ck.fixtures(LESSON, flagged=True) if f.name == "patches_watch")
    ck.submit(course, "ann", LESSON, ck.submission_from(student, answers))
    ck.submit(course, "ben", LESSON, ck.submission_from(student, {**answers, **gaming.answers}))
    data = rows.class_rows(course, LESSON)
    by = {r.student: r for r in data.rows}
    stem = ck.solution_path(LESSON).stem
    assert (by["ann"].flags, by["ben"].flags) == ([], [f"{stem} {FLAGGED['patches_watch'][0]}"])
    shown = table.show(data)
    assert f"ben: {stem} fast_epoch line 1: changes Watch._read" in shown and "ann:" not in shown
    page_path, csv_path, _ = report.write(course, LESSON)
    assert "changes Watch._read" in page_path.read_text()
    assert "fast_epoch line 1: changes Watch._read" in csv_path.read_text()
