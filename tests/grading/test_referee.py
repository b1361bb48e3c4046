"""An answer cell that rebinds what a test judges with is flagged (coursetools.grading.referee), and
no right or wrong answer of any lesson is: the flag is the instructor's lead and never cries wolf.

The gaming fixtures in tests/fixtures/<lesson>/flagged/ patch lesson 09's referee from an answer
cell, one mechanism each; the class table and the class report show their flags. No kernel runs."""

from __future__ import annotations

import html

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
    "patches_by_alias": ["fast_epoch line 2: changes W._read (it names Watch._read)"],
    "patches_through_the_namespace": [
        "fast_epoch line 3: changes sys.modules[...].Watch._read (it names Watch._read)"
    ],
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
        ("Spy.__dict__['x'] = 1", ["c1 line 1: changes Spy.__dict__[...] (it names Spy.x)"]),
        ("sys.modules['torch'] = None", ["c1 line 1: changes sys.modules[...]"]),
        ("np = None", ["c1 line 1: rebinds np (it names numpy)"]),
        (
            "import unittest.mock\nunittest.mock.patch('time.perf_counter').start()",
            ["c1 line 2: changes time.perf_counter"],
        ),
        ("del time.sleep", ["c1 line 1: changes time.sleep"]),
        ("class Spy:\n    pass", ["c1 line 1: defines Spy again"]),
        ("from os import path as judge", ["c1 line 1: imports over judge"]),
        ("def mine():\n    from os import path as judge", []),  # a local name
        ("import os\nos.environ['OMP_NUM_THREADS'] = '1'", []),  # a setting, not a function
        ("globals()['helper'] = 1", []),  # the learner's own name
        ("S = Spy\nS = None", []),  # the alias rebound, the referee untouched
        ("c = torch.backends.cudnn\nc.benchmark = True", []),  # a setting under another name
        ("def f(m=Spy):\n    pass\n\ndef g(m):\n    m.x = 1", []),  # another function's m
        ("S = Spy\n\ndef f(S):\n    S.x = 1", []),  # a parameter hides the alias
        ("def f(torch):\n    torch.x = 1", []),  # and an import's name
        ("names = dict(globals())\nnames['Spy'] = 1", []),  # a copy
        ("S = Spy\nglobals()['S'] = 1", []),  # the alias rebound, not Spy
        ("box = {'s': Spy}\nbox.vars()['Spy'] = 1", []),  # a method, not the builtin
    ],
)
def test_the_rules(answer, flagged):
    assert referee.flags(_notebook(REFEREE, ("answer", answer))) == flagged


@pytest.mark.parametrize(
    "answer, flagged",
    [
        ("S = Spy\nS.x = 1", ["c1 line 2: changes S.x (it names Spy.x)"]),
        (
            "T = torch.Tensor\nT.item = None",
            ["c1 line 2: changes T.item (it names torch.Tensor.item)"],
        ),
        (
            "S, T = Spy, torch.Tensor\nT.item = None",
            ["c1 line 2: changes T.item (it names torch.Tensor.item)"],
        ),
        ("S = Spy\nsetattr(S, 'x', 1)", ["c1 line 2: changes S.x (it names Spy.x)"]),
        ("A = Spy\nB = A\nB.x = 1", ["c1 line 3: changes B.x (it names Spy.x)"]),
        ("for S in (Spy,):\n    S.x = 1", ["c1 line 2: changes S.x (it names Spy.x)"]),
        ("def f(S=Spy):\n    S.x = 1", ["c1 line 2: changes S.x (it names Spy.x)"]),
        ("from __main__ import Spy as S\nS.x = 1", ["c1 line 2: changes S.x (it names Spy.x)"]),
        (
            "import torch as t\nt.cuda.synchronize = None",
            ["c1 line 2: changes t.cuda.synchronize (it names torch.cuda.synchronize)"],
        ),
        (
            "c = torch.cuda\nc.synchronize = None",
            ["c1 line 2: changes c.synchronize (it names torch.cuda.synchronize)"],
        ),
        ("def f():\n    S = Spy\n    S.x = 1", ["c1 line 3: changes S.x (it names Spy.x)"]),
        (
            "def f():\n    global S\n    S = Spy\n\nS.x = 1",
            ["c1 line 5: changes S.x (it names Spy.x)"],
        ),
        (
            "def f():\n    import torch as t\n    t.Tensor.item = None",
            ["c1 line 3: changes t.Tensor.item (it names torch.Tensor.item)"],
        ),
        ("globals()['Spy'] = 1", ["c1 line 1: rebinds globals()[...] (it names Spy)"]),
        ("vars()['judge'] = 1", ["c1 line 1: rebinds vars()[...] (it names judge)"]),
        ("globals()[name] = 1", ["c1 line 1: changes globals()[...]"]),
        ("g = globals()\ng['Spy'] = 1", ["c1 line 2: rebinds g[...] (it names Spy)"]),
        ("globals().update(Spy=1)", ["c1 line 1: rebinds globals().update(...) (it names Spy)"]),
        (
            "sys.modules['__main__'].Spy.x = 1",
            ["c1 line 1: changes sys.modules[...].Spy.x (it names Spy.x)"],
        ),
        ("sys.modules[__name__].Spy = 1", ["c1 line 1: changes sys.modules[...].Spy"]),
        (
            "g = globals()\ng['torch'].cuda.synchronize = None",
            ["c1 line 2: changes g[...].cuda.synchronize (it names torch.cuda.synchronize)"],
        ),
        (
            "mods = sys.modules\nmods['__main__'].Spy.x = 1",
            ["c1 line 2: changes mods[...].Spy.x (it names Spy.x)"],
        ),
        (
            "from unittest import mock\nmock.patch.dict(globals(), {'Spy': None}).start()",
            ["c1 line 2: changes globals()[...]"],
        ),
        (
            "import __main__\n__main__.Spy.x = 1",
            ["c1 line 2: changes __main__.Spy.x (it names Spy.x)"],
        ),
        (
            "import sys as s\nm = s.modules['__main__']\nm.judge = None",
            ["c1 line 3: rebinds m.judge (it names judge)"],
        ),
        (
            "def f():\n    global Spy\n    Spy = 1",
            ["c1 line 2: declares Spy global", "c1 line 3: rebinds Spy"],
        ),
        ("def f():\n    global np", ["c1 line 2: declares np global"]),
        ("object.__setattr__(Spy, 'x', 1)", ["c1 line 1: changes Spy.x"]),
        ("(Spy.x, y) = (1, 2)", ["c1 line 1: changes Spy.x"]),
        ("if True:\n    judge = None", ["c1 line 2: rebinds judge"]),
    ],
)
def test_a_referee_under_another_name(answer, flagged):
    """An alias, the notebook's namespace, a `global` statement: each reaches the referee."""
    assert referee.flags(_notebook(REFEREE, ("answer", answer))) == flagged


def test_an_alias_holds_for_the_rest_of_the_notebook():
    """Bound in one answer cell, used in a later one (each judged by itself, as a kernel runs)."""
    nb = _notebook(REFEREE, ("answer", "S = Spy"), ("answer", "S.x = 1"))
    assert referee.flags(nb) == ["c2 line 1: changes S.x (it names Spy.x)"]


def test_a_name_defined_later_is_no_referee():
    """A learner's helper named like a read-only cell's later function rebinds nothing yet."""
    nb = _notebook(("answer", "def judge(x):\n    return 0"), REFEREE)
    assert referee.flags(nb) == []


def test_the_class_table_and_report_show_the_flags(tmp_path):
    """Flagged submissions, before or after autograde (one learner per gaming fixture): each row,
    the table and the report say what each patched; the solution's row, nothing."""
    course = tmp_path / "course"
    student, answers = ck.read(ck.student_path(LESSON)), ck.solution_answers(LESSON)
    ck.submit(course, "ann", LESSON, ck.submission_from(student, answers))
    for f in ck.fixtures(LESSON, flagged=True):
        nb = ck.submission_from(student, {**answers, **f.answers})
        ck.submit(course, f.name, LESSON, nb)
    data = rows.class_rows(course, LESSON)
    by = {r.student: r for r in data.rows}
    stem = ck.solution_path(LESSON).stem
    assert by["ann"].flags == []
    assert {name: by[name].flags for name in FLAGGED} == {
        name: [f"{stem} {flag}" for flag in found] for name, found in FLAGGED.items()
    }
    shown = table.show(data)
    assert "ann:" not in shown
    page, csv = (path.read_text() for path in report.write(course, LESSON)[:2])
    for name, found in FLAGGED.items():
        for flag in found:
            assert f"{name}: {stem} {flag}" in shown
            assert html.escape(flag) in page and flag in csv
