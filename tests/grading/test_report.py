"""The class report (tools/report.py) and feedback without the hidden tests' code (tools/grade.py's HideHiddenTests).

Fast here, with no kernel: a small gradebook written through nbgrader's API with autograded notebooks beside it
(a right answer, two students failing with the same message, a timeout, a dead kernel, a written answer waiting),
the preprocessor on a real IPython traceback, and the grading times `tools/grade.py` keeps.

On the real thing, in tests/test_classroom.py's loop (lesson 01: right, partly wrong, untouched and the other
wrong answers, graded by nbgrader): `check_report` builds the report from that gradebook and holds its numbers to
the scores nbgrader holds, and `check_feedback` reads the feedback nbgrader generated (a failed hidden test is named,
none of its lines are shown) and generates it again with the switch off (then they are).
"""

from __future__ import annotations

import csv
import html
import json
import os
import re
import sys
import warnings
from pathlib import Path

import browserkit
import coursekit as ck
import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook, new_output

from coursetools import grade
from coursetools import report

ASSIGNMENT, NOTEBOOK = "00_report", "quiz"
CELLS = {"test_add": 1.0, "test_mul": 2.0}  # test cells and their points; "why" is a written answer of 2 points
SAME = "AssertionError: add(2, 2) must be 4"
CLASS = {  # student -> (score of each test cell or its error, written answer's score: None waits for a person)
    "ann": ({"test_add": 1.0, "test_mul": 2.0}, 2.0),
    "ben": ({"test_add": SAME, "test_mul": 2.0}, None),
    "cy": ({"test_add": SAME, "test_mul": f"{grade.TIMEOUT}: test_mul gave no reply within 120 s"}, 1.0),
    "dee": ({"test_add": 1.0, "test_mul": f"{grade.DIED}: the kernel died while running test_mul"}, None),
}


def _graded_notebook(results: dict) -> nbformat.NotebookNode:
    cells = [new_markdown_cell("# Quiz")]
    for grade_id, result in results.items():
        cell = new_code_cell(f"assert {grade_id[5:]}(2, 2)")
        cell.metadata.nbgrader = {"grade": True, "solution": False, "grade_id": grade_id, "points": CELLS[grade_id]}
        if isinstance(result, str):
            ename, evalue = result.split(": ", 1)
            cell.outputs = [new_output("error", ename=ename, evalue=f"{evalue}\nmore detail", traceback=[result])]
        cells.append(cell)
    return new_notebook(cells=cells)


def synthetic_course(tmp: Path) -> Path:
    """A graded class written through nbgrader's API: the gradebook, autograded/ and make grade's times."""
    from nbgrader.api import Gradebook

    course = tmp / "course"
    course.mkdir()
    path, os.environ["PATH"] = os.environ.get("PATH", ""), ck.env()["PATH"]  # a new gradebook runs `alembic`
    try:
        gb = Gradebook(f"sqlite:///{course / 'gradebook.db'}")
    finally:
        os.environ["PATH"] = path
    with gb, warnings.catch_warnings():
        warnings.simplefilter("ignore")  # SQLAlchemy's about nbgrader's own add_submission, as autograde gets them
        gb.add_assignment(ASSIGNMENT)
        gb.add_notebook(NOTEBOOK, ASSIGNMENT)
        for name, points in CELLS.items():
            gb.add_grade_cell(name, NOTEBOOK, ASSIGNMENT, max_score=points, cell_type="code")
        gb.add_grade_cell("why", NOTEBOOK, ASSIGNMENT, max_score=2.0, cell_type="markdown")
        gb.add_solution_cell("why", NOTEBOOK, ASSIGNMENT)
        for student, (results, written) in CLASS.items():
            gb.add_student(student)
            gb.add_submission(ASSIGNMENT, student)
            for name, result in results.items():
                g = gb.find_grade(name, NOTEBOOK, ASSIGNMENT, student)
                g.auto_score, g.needs_manual_grade = (result if isinstance(result, float) else 0.0), False
            g = gb.find_grade("why", NOTEBOOK, ASSIGNMENT, student)
            g.manual_score, g.needs_manual_grade = written, written is None
            gb.db.commit()
            path = course / "autograded" / student / ASSIGNMENT / f"{NOTEBOOK}.ipynb"
            path.parent.mkdir(parents=True)
            graded = _graded_notebook(results)
            if student == "ann":  # what lesson 09's measurement cell prints
                graded.cells.append(new_code_cell("measure()", outputs=[new_output(
                    "stream", name="stdout", text="fast_train speed-up over the baseline: 1.85x (ann's machine)\n")]))
            nbformat.write(graded, path)
    (course / grade.REPORTS).mkdir()
    (course / grade.REPORTS / grade.TIMES).write_text(json.dumps({ASSIGNMENT: {"ann": 12.3, "ben": 30.0}}))
    return course


def page_text(page: str) -> str:
    """What a reader of an HTML page sees (tags dropped: syntax highlighting splits code into spans)."""
    return html.unescape(re.sub(r"<[^>]+>", "", page))


def test_report_of_a_small_class(tmp_path):
    course = synthetic_course(tmp_path)
    page_path, csv_path, data = report.write(course, ASSIGNMENT)
    assert (page_path, csv_path) == (course / "reports" / f"{ASSIGNMENT}.html", course / "reports" / f"{ASSIGNMENT}.csv")
    rows = {row["student"]: row for row in csv.DictReader(csv_path.open())}
    assert {s: float(r["score"]) for s, r in rows.items()} == {"ann": 5.0, "ben": 2.0, "cy": 1.0, "dee": 1.0}
    assert {float(r["max_score"]) for r in rows.values()} == {5.0}
    assert rows["ann"]["grading_seconds"] == "12.3" and rows["cy"]["grading_seconds"] == ""
    assert (rows["cy"]["timed_out"], rows["dee"]["kernel_died"]) == ("test_mul", "test_mul")
    assert rows["ben"]["ungraded"] == rows["dee"]["ungraded"] == "why" and rows["cy"]["ungraded"] == ""
    assert (rows["ben"]["test_add"], rows["ben"]["test_mul"]) == ("0.0", "2.0")
    assert (rows["ann"]["speedup"], rows["ben"]["speedup"]) == ("1.85", ""), "the measured speed-up, where one was printed"

    tests = {t["cell"]: t for t in data["tests"]}
    assert list(tests) == ["test_add", "test_mul"], "test cells in the notebook's order; the written answer is not one"
    assert [(t["points"], t["passed"], t["submissions"]) for t in tests.values()] == [(1.0, 2, 4), (2.0, 2, 4)]
    assert tests["test_add"]["failures"] == {SAME: 2}, "grouped by the error's first line"
    assert tests["test_add"]["who"][SAME] == ["ben", "cy"]
    assert set(tests["test_mul"]["failures"]) == {CLASS["cy"][0]["test_mul"], CLASS["dee"][0]["test_mul"]}
    assert data["ungraded"] == [("ben", "why", 2.0), ("dee", "why", 2.0)]

    page = page_path.read_text()
    text = page_text(page)
    assert "4 submissions; mean 2.25, median 1.5 of 5 points" in text
    assert f"2 × {SAME} (ben, cy)" in text
    assert "speed-up (measured, not graded)" in text and "1.85x" in text
    assert "2 / 4" in text and "50%" in text and "2 timed: median 21 s, longest 30 s" in text
    (png,) = re.findall(r'<img id="scores"[^>]* src="data:image/png;base64,([^"]+)"', page)
    import base64

    assert base64.b64decode(png).startswith(b"\x89PNG"), "the plot is embedded in the page"
    assert not re.search(r"""(src|href)=["']?(https?:|//|/)""", page), "the page needs nothing but itself"


def test_report_refuses_without_a_gradebook(tmp_path, capsys):
    import pytest

    with pytest.raises(SystemExit):
        report.main(["01_verify_gpu", "--course", str(tmp_path)])
    assert "grade first" in capsys.readouterr().err


def test_grade_keeps_each_submissions_grading_time(tmp_path, monkeypatch):
    import subprocess

    for student in ("ann", "ben"):
        (tmp_path / "submitted" / student / ASSIGNMENT).mkdir(parents=True)
    monkeypatch.setattr(grade, "_nbgrader", lambda *a: subprocess.CompletedProcess(a, 0, "", ""))
    monkeypatch.setattr(grade, "table", lambda course, lesson, seconds: seconds)
    grade.grade(tmp_path, ASSIGNMENT, jobs=2, extra=[])
    (tmp_path / "submitted" / "ann" / ASSIGNMENT).rmdir()
    grade.grade(tmp_path, ASSIGNMENT, jobs=1, extra=[])  # ben again: ann's time stays
    times = grade.grading_times(tmp_path)
    assert set(times) == {ASSIGNMENT} and set(times[ASSIGNMENT]) == {"ann", "ben"}
    assert all(isinstance(s, float) and s >= 0 for s in times[ASSIGNMENT].values())


TEST_CELL = """assert f(1) == 2, "one plus one"
x = 1
### BEGIN HIDDEN TESTS
y = f(2)
assert y == 4, "two plus two"
### END HIDDEN TESTS"""
# What IPython printed for that cell's hidden assertion (nbclient, the pinned stack), colours included.
TRACEBACK = [
    "\x1b[31m---------------------------------------------------------------------------\x1b[39m",
    "\x1b[31mAssertionError\x1b[39m                            Traceback (most recent call last)",
    "\x1b[36mCell\x1b[39m\x1b[36m \x1b[39m\x1b[32mIn[2]\x1b[39m\x1b[32m, line 5\x1b[39m\n"
    "\x1b[32m      1\x1b[39m \x1b[38;5;28;01massert\x1b[39;00m f(\x1b[32m1\x1b[39m) == \x1b[32m2\x1b[39m, "
    "\x1b[33m\"one plus one\"\x1b[39m\n"
    "\x1b[32m      2\x1b[39m x = \x1b[32m1\x1b[39m\n"
    "\x1b[32m      3\x1b[39m \x1b[38;5;66;03m### BEGIN HIDDEN TESTS\x1b[39;00m\n"
    "\x1b[32m      4\x1b[39m y = f(\x1b[32m2\x1b[39m)\n"
    "\x1b[32m----> \x1b[39m\x1b[32m5\x1b[39m \x1b[38;5;28;01massert\x1b[39;00m y == \x1b[32m4\x1b[39m, "
    "\x1b[33m\"two plus two\"\x1b[39m\n"
    "\x1b[32m      6\x1b[39m \x1b[38;5;66;03m### END HIDDEN TESTS\x1b[39;00m\n",
    "\x1b[31mAssertionError\x1b[39m: two plus two",
]


def _failed_hidden_test() -> nbformat.NotebookNode:
    cell = new_code_cell(TEST_CELL, execution_count=2)
    cell.metadata.nbgrader = {"grade": True, "solution": False, "grade_id": "test_f", "points": 1}
    cell.outputs = [new_output("error", ename="AssertionError", evalue="two plus two", traceback=TRACEBACK)]
    return new_notebook(cells=[cell])


def test_feedback_names_a_failed_hidden_test_without_its_code():
    (cell,) = grade.HideHiddenTests()(_failed_hidden_test(), {})[0].cells
    shown = cell.source + "\n" + report.ANSI.sub("", "\n".join(cell.outputs[0].traceback))
    assert "AssertionError: two plus two" in shown and "----> 5 (a hidden test: its code is not shown)" in shown
    assert 'assert f(1) == 2, "one plus one"' in shown and "x = 1" in shown, "the visible test stays"
    for line in ("y = f(2)", 'assert y == 4, "two plus two"', "HIDDEN TESTS\n"):
        assert line not in shown, f"{line!r} is hidden code"
    assert grade.HideHiddenTests.note in cell.source

    (cell,) = grade.HideHiddenTests(enabled=False)(_failed_hidden_test(), {})[0].cells
    assert (cell.source, cell.outputs[0].traceback) == (TEST_CELL, TRACEBACK), "switched off: nbgrader's feedback"


# ---- on the classroom loop's gradebook (called from tests/test_classroom.py) -------------------------------------

def check_report(course: Path, lesson: str) -> dict:
    """Build the report of ``lesson`` from ``course``'s gradebook; its numbers are the ones nbgrader holds."""
    page_path, csv_path, data = report.write(course, lesson)
    notebook = ck.solution_path(lesson).stem
    students = sorted(p.name for p in (course / "autograded").iterdir())
    held = {s: ck.scores(course, lesson, s) for s in students}
    rows = {row["student"]: row for row in csv.DictReader(csv_path.open())}
    assert sorted(rows) == students, "one row per submission"
    for student, grades in held.items():
        assert float(rows[student]["score"]) == sum(score or 0 for score, _, _ in grades.values()), student
        assert float(rows[student]["max_score"]) == sum(points for _, points, _ in grades.values()), student
        assert set(rows[student]["ungraded"].split()) == {g for g, (_, _, manual) in grades.items() if manual}
    tests = [c.metadata.nbgrader.grade_id for c in ck.nbgrader_cells(ck.read(ck.solution_path(lesson)), "test")]
    assert [t["cell"] for t in data["tests"]] == tests, "every test cell, in the notebook's order"
    for t in data["tests"]:
        passed = [s for s in students if held[s][t["cell"]][0] == held[s][t["cell"]][1]]
        assert (t["passed"], t["submissions"], t["points"]) == (len(passed), len(students), held[students[0]][t["cell"]][1])
        assert sum(t["failures"].values()) == len(students) - len(passed), f"{t['cell']}: one message per failure"
        for message, who in t["who"].items():
            for student in who:
                graded = ck.read(course / "autograded" / student / lesson / f"{notebook}.ipynb")
                (cell,) = [c for c in graded.cells if c.metadata.get("nbgrader", {}).get("grade_id") == t["cell"]]
                error = next(o for o in cell.outputs if o.output_type == "error")
                assert message == report.first_line(error), f"{student}'s {t['cell']}: the error's first line"
    ungraded = {(s, g) for s in students for g, (_, _, manual) in held[s].items() if manual}
    assert {(s, g) for s, g, _ in data["ungraded"]} == ungraded and ungraded, "the written answers left to grade"
    text = page_text(page_path.read_text())
    scores = [float(rows[s]["score"]) for s in students]
    assert f"{len(students)} submissions; mean {sum(scores) / len(scores):.2f}" in text
    assert f"{len(ungraded)} written answers still wait for a person" in text
    assert "Not timed" in text, "graded with a plain nbgrader autograde: no times"
    return data


def check_feedback(course: Path, lesson: str, student: str) -> None:
    """``student`` failed a hidden test: the feedback nbgrader generated names the failure and shows none of the
    hidden tests' lines; generated again with ``--HideHiddenTests.enabled=False``, it shows them."""
    name = ck.solution_path(lesson).stem
    hidden, visible = [], []
    for cell in ck.nbgrader_cells(ck.read(ck.solution_path(lesson)), "test"):
        inside = False
        for line in cell.source.splitlines():
            inside = (inside or "BEGIN HIDDEN TESTS" in line) and "END HIDDEN TESTS" not in line
            (hidden if inside and "HIDDEN TESTS" not in line else visible).append(line.strip())
    hidden = [line for line in hidden if len(line) >= 10 and line not in visible]  # short ones: ")" is everywhere
    graded = ck.read(course / "autograded" / student / lesson / f"{name}.ipynb")
    failed_hidden = []
    for cell in ck.nbgrader_cells(graded, "test"):
        errors = [o for o in cell.outputs if o.output_type == "error"]
        arrow = [line for line in report.ANSI.sub("", "\n".join(errors[0].traceback)).splitlines()
                 if line.startswith("---->")] if errors else []
        if arrow and any(h in arrow[-1] for h in hidden):
            failed_hidden.append(report.first_line(errors[0]))
    assert failed_hidden, f"{student} fails a hidden test"
    for who in sorted(p.name for p in (course / "feedback").iterdir()):
        text = page_text((course / "feedback" / who / lesson / f"{name}.html").read_text())
        shown = [line for line in hidden if line in text]
        assert not shown, f"{who}'s feedback shows hidden test code: {shown[:3]}"
        if who == student:
            assert all(message in text for message in failed_hidden), "the failed hidden test is named with its error"
            assert "(a hidden test: its code is not shown)" in text
    switched = ck.nbgrader(course, "generate_feedback", lesson, f"--student={student}", "--force",
                           "--HideHiddenTests.enabled=False", "--CourseDirectory.feedback_directory=feedback-shown", check=False)
    assert switched.returncode == 0, switched.stderr
    text = page_text((course / "feedback-shown" / student / lesson / f"{name}.html").read_text())
    assert all(line in text for line in hidden), "with the switch off, the feedback shows the hidden tests"


def test_class_report_in_chromium(tmp_path):
    """The class report opens in a real browser from its file, alone, with its plot drawn."""
    reason = browserkit.why_no_browser()
    if reason:
        pytest.skip(reason)
    page_path, _, data = report.write(synthetic_course(tmp_path), ASSIGNMENT)
    with browserkit.chromium_page() as page:
        asked = []
        page.on("request", lambda request: asked.append(request.url))
        page.goto(page_path.as_uri())
        plot = page.locator("img#scores")
        plot.scroll_into_view_if_needed()
        drawn = plot.evaluate("img => img.complete && img.naturalWidth > 0 ? [img.naturalWidth, img.width] : null")
        heading = page.locator("h1").inner_text()
        browserkit.ARTIFACTS.mkdir(exist_ok=True)
        shot = browserkit.ARTIFACTS / "class-report.png"
        page.screenshot(path=str(shot), full_page=True)
    assert drawn and drawn[1] > 300, f"the score histogram is drawn in the page (natural and shown width: {drawn})"
    assert heading == f"{ASSIGNMENT}: class report"
    assert all(url.startswith(("file:", "data:")) for url in asked), f"the page fetched something else: {asked}"
    print(f"\nclass report of {len(data['students'])} submissions: plot {drawn[0]} px wide; {shot.relative_to(ck.ROOT)}")
