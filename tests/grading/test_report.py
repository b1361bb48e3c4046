"""The class rows, their two renderings (the class table, the class report) and feedback without
hidden tests.

Fast here, with no kernel: a small gradebook written through nbgrader's API with autograded
notebooks beside it (a right answer, two students failing with the same message, a timeout, a dead
kernel, written answers waiting, two submissions autograde could not read, one printed fake
speed-up), HideHiddenTests on a real IPython traceback, and the grading times `make grade` keeps.
The same checks on a class nbgrader really graded run in test_classroom.py (gradingkit.check_report,
gradingkit.check_feedback).
"""

from __future__ import annotations

import base64
import csv
import json
import re
import subprocess
import warnings
from pathlib import Path

import browserkit
import coursekit as ck
import gradingkit as gk
import nbformat
import pytest
from coursetools.grading import report, rows, table
from coursetools.grading.cells import DIED, TIMEOUT, HideHiddenTests
from coursetools.text import strip_ansi
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook, new_output

ASSIGNMENT, NOTEBOOK = "00_report", "quiz"
# test cells and their points; "why" is a written answer of 2 points
CELLS = {"test_add": 1.0, "test_mul": 2.0}
SAME = "AssertionError: add(2, 2) must be 4"
# student -> (score of each test cell or its error, written answer's score: None waits for a person)
CLASS = {
    "ann": ({"test_add": 1.0, "test_mul": 2.0}, 2.0),
    "ben": ({"test_add": SAME, "test_mul": 2.0}, None),
    "cy": ({"test_add": SAME, "test_mul": f"{TIMEOUT}: test_mul gave no reply within 120 s"}, 1.0),
    "dee": ({"test_add": 1.0, "test_mul": f"{DIED}: the kernel died while running test_mul"}, None),
}
# submitted files autograde could not read
UNREADABLE = {"eve": b"", "fay": b"my answers are in the email\n"}
# what lesson 09's locked cell prints
MEASURED = "fast_train speed-up over the baseline: {}x on cpu (1.5 s -> 0.8 s)\n"


def _graded_notebook(results: dict) -> nbformat.NotebookNode:
    cells = [new_markdown_cell("# Quiz")]
    for grade_id, result in results.items():
        cell = new_code_cell(f"assert {grade_id[5:]}(2, 2)")
        meta = {"grade": True, "solution": False, "grade_id": grade_id, "points": CELLS[grade_id]}
        cell.metadata.nbgrader = meta
        if isinstance(result, str):
            ename, evalue = result.split(": ", 1)
            error = new_output(
                "error", ename=ename, evalue=f"{evalue}\nmore detail", traceback=[result]
            )
            cell.outputs = [error]
        cells.append(cell)
    return new_notebook(cells=cells)


def _printed(source: str, text: str, grade_id: str | None = None):
    """A code cell that printed ``text``; locked with ``grade_id`` where one is given."""
    cell = new_code_cell(source, outputs=[new_output("stream", name="stdout", text=text)])
    if grade_id:
        cell.metadata.nbgrader = {
            "grade": False,
            "solution": False,
            "locked": True,
            "grade_id": grade_id,
        }
    return cell


def _gradebook(course: Path):
    return ck.new_gradebook(course / "gradebook.db")


def synthetic_course(tmp: Path) -> Path:
    """A graded class written through nbgrader's API: the gradebook, autograded/ and make grade's
    times."""
    course = tmp / "course"
    course.mkdir()
    with _gradebook(course) as gb, warnings.catch_warnings():
        # SQLAlchemy's about nbgrader's own add_submission, as autograde gets them
        warnings.simplefilter("ignore")
        gb.add_assignment(ASSIGNMENT)
        gb.add_notebook(NOTEBOOK, ASSIGNMENT)
        for name, points in CELLS.items():
            gb.add_grade_cell(name, NOTEBOOK, ASSIGNMENT, max_score=points, cell_type="code")
        gb.add_grade_cell("why", NOTEBOOK, ASSIGNMENT, max_score=2.0, cell_type="markdown")
        gb.add_solution_cell("why", NOTEBOOK, ASSIGNMENT)
        for student in [*CLASS, *UNREADABLE]:
            gb.add_student(student)
            gb.add_submission(ASSIGNMENT, student)
            results, written = CLASS.get(student, ({}, None))
            # what autograde leaves where it could not read: every cell waits for a person
            for name in CELLS:
                g = gb.find_grade(name, NOTEBOOK, ASSIGNMENT, student)
                result = results.get(name)
                g.auto_score = result if isinstance(result, float) else 0.0
                g.needs_manual_grade = student in UNREADABLE
            g = gb.find_grade("why", NOTEBOOK, ASSIGNMENT, student)
            g.manual_score, g.needs_manual_grade = written, written is None
            gb.db.commit()
    for student, data in UNREADABLE.items():
        path = course / "submitted" / student / ASSIGNMENT / f"{NOTEBOOK}.ipynb"
        path.parent.mkdir(parents=True)
        path.write_bytes(data)
    for student, (results, _) in CLASS.items():
        path = course / "autograded" / student / ASSIGNMENT / f"{NOTEBOOK}.ipynb"
        path.parent.mkdir(parents=True)
        graded = _graded_notebook(results)
        if student == "ann":  # lesson 09's locked measurement cell
            graded.cells.append(_printed("measure()", MEASURED.format("1.85"), rows.SPEEDUP_CELL))
        if student == "ben":  # a ratio printed by the learner's own cell: not a measurement
            graded.cells.append(_printed("print(...)", MEASURED.format("99.00")))
        nbformat.write(graded, path)
    (course / rows.REPORTS).mkdir()
    times = {ASSIGNMENT: {"ann": 12.3, "ben": 30.0}}
    (course / rows.REPORTS / rows.TIMES).write_text(json.dumps(times))
    return course


@pytest.fixture(scope="module")
def course(tmp_path_factory) -> Path:
    """The synthetic class, written once for this module's tests (they only read it and write
    reports/)."""
    return synthetic_course(tmp_path_factory.mktemp("report"))


def test_class_rows(course):
    """One row per submission, from the gradebook and autograded/: scores, failures, incidents,
    waiting answers."""
    data = rows.class_rows(course, ASSIGNMENT)
    by = {r.student: r for r in data.rows}
    assert list(by) == ["ann", "ben", "cy", "dee", "eve", "fay"]
    assert [(t.label, t.points) for t in data.tests] == [("test_add", 1.0), ("test_mul", 2.0)]
    assert data.written == {"why": 2.0} and data.max_score == 5.0
    assert {s: r.score for s, r in by.items()} == {
        "ann": 5,
        "ben": 2,
        "cy": 1,
        "dee": 1,
        "eve": 0,
        "fay": 0,
    }
    assert {s: r.failed for s, r in by.items() if r.failed} == {
        "ben": ["test_add"],
        "cy": ["test_add", "test_mul"],
        "dee": ["test_mul"],
    }
    assert by["ben"].messages == {"test_add": SAME}
    assert (by["cy"].timed_out, by["dee"].kernel_died) == (["test_mul"], ["test_mul"])
    assert {s: r.ungraded for s, r in by.items() if r.ungraded} == {"ben": ["why"], "dee": ["why"]}
    assert (by["ben"].waiting, by["ann"].seconds, by["cy"].seconds) == (2.0, 12.3, None)


def test_unreadable_submissions(course):
    """What autograde could not read is said so: no failed test, no written answer waiting, the
    reason."""
    data = rows.class_rows(course, ASSIGNMENT)
    by = {r.student: r for r in data.rows}
    assert {s: r.status for s, r in by.items() if r.status != rows.GRADED} == {
        "eve": rows.UNREADABLE,
        "fay": rows.UNREADABLE,
    }
    assert (by["eve"].why, by["fay"].why) == ("an empty file", "not a notebook")
    for student in UNREADABLE:
        assert (by[student].failed, by[student].ungraded, by[student].cells) == ([], [], {})
    summaries = {t.label: t for t in report.cell_summaries(data)}
    assert [(t.passed, t.submissions) for t in summaries.values()] == [(2, 4), (2, 4)]
    assert rows.NO_ERROR not in summaries["test_add"].failures


def test_speedup_only_from_locked_cell(course):
    """The ratio comes from the output of the cell `measure_speedup` alone: a printed fake elsewhere
    is ignored."""
    by = {r.student: r for r in rows.class_rows(course, ASSIGNMENT).rows}
    assert {s: r.speedup for s, r in by.items()} == {s: None for s in by} | {"ann": 1.85}
    fake = new_notebook(cells=[_printed("print(...)", MEASURED.format("9.00"))])
    assert rows.speedup(fake) is None, "a line printed by any other cell"
    fake.cells.append(_printed("measure()", MEASURED.format("1.20"), rows.SPEEDUP_CELL))
    assert rows.speedup(fake) == 1.2


def test_table_and_report_agree(course):
    """The class table and the class report (HTML and CSV) render the same rows."""
    _, csv_path, data = report.write(course, ASSIGNMENT)
    assert data == rows.class_rows(course, ASSIGNMENT)
    printed = {line.split()[0]: line for line in table.show(data).splitlines()[1:]}
    written = {row["student"]: row for row in csv.DictReader(csv_path.open())}
    assert list(printed) == ["ann", "ben", "cy", "dee", "eve", "fay"], (
        "ranked by speed-up, then by name"
    )
    assert set(printed) == set(written)
    for student, row in written.items():
        line = printed[student]
        if row["status"] == rows.GRADED:
            assert f"{float(row['score']):g} / {float(row['max_score']):g}" in line, line
            cells = [row[k] or "-" for k in ("failed", "timed_out", "kernel_died", "not_run")]
            assert line.endswith(" | ".join(c.replace(" ", ", ") for c in cells)), line
        else:
            assert row["status"] in line and row["score"] == "0.0", line
        ratio = f"{float(row['speedup']):.2f}x" if row["speedup"] else " - "
        assert ratio in line, line


def test_table_golden(course):
    """The class table as an instructor reads it (the one test of its wording)."""
    data = rows.class_rows(course, ASSIGNMENT)
    assert table.show(data).splitlines() == [
        "student                             score seconds speed-up"
        "  failed cells | timeouts | kernel deaths | not run",
        "ann                                 5 / 5      12    1.85x  - | - | - | -",
        "ben                    2 / 5 (+2 by hand)      30        -  test_add | - | - | -",
        "cy                                  1 / 5       -        -  "
        "test_add, test_mul | test_mul | - | -",
        "dee                    1 / 5 (+2 by hand)       -        -  test_mul | - | test_mul | -",
        "eve                     could not be read       -        -  (an empty file)",
        "fay                     could not be read       -        -  (not a notebook)",
    ]


def test_report_of_a_small_class(course):
    """The page and the CSV: counts per test cell, messages grouped, waiting answers counted per
    answer."""
    page_path, csv_path, data = report.write(course, ASSIGNMENT)
    assert (page_path, csv_path) == (
        course / "reports" / f"{ASSIGNMENT}.html",
        csv_path.with_suffix(".csv"),
    )
    assert csv_path.parent == page_path.parent
    written = {row["student"]: row for row in csv.DictReader(csv_path.open())}
    assert (written["ann"]["grading_seconds"], written["cy"]["grading_seconds"]) == ("12.3", "")
    assert (written["ben"]["test_add"], written["ben"]["test_mul"]) == ("0.0", "2.0")
    assert (written["ann"]["speedup"], written["ben"]["speedup"]) == ("1.85", "")
    assert (written["eve"]["status"], written["eve"]["ungraded"]) == (rows.UNREADABLE, "")

    summaries = {t.label: t for t in report.cell_summaries(data)}
    assert summaries["test_add"].failures == {SAME: 2}, "grouped by the error's first line"
    assert summaries["test_add"].who[SAME] == ["ben", "cy"]
    assert set(summaries["test_mul"].failures) == {
        CLASS["cy"][0]["test_mul"],
        CLASS["dee"][0]["test_mul"],
    }
    assert report.waiting(data) == {"why": ["ben", "dee"]}, (
        "a count per written answer, names folded"
    )

    page = page_path.read_text()
    text = gk.page_text(page)
    assert "4 submissions graded; mean 2.25, median 1.5 of 5 points; 2 could not be read" in text
    assert "2 written answers still wait for a person" in text
    assert re.search(r"<td><code>why</code></td><td>2</td><td>2</td><td>ben, dee</td>", page)
    assert re.search(r"<td>eve</td><td>an empty file</td>", page)
    (png,) = re.findall(r'<img id="scores"[^>]* src="data:image/png;base64,([^"]+)"', page)
    assert base64.b64decode(png).startswith(b"\x89PNG"), "the plot is embedded in the page"
    assert not re.search(r"""(src|href)=["']?(https?:|//|/)""", page), (
        "the page needs nothing but itself"
    )


def test_waiting_names_folded(tmp_path):
    """At a class's size the written answers waiting are one row per answer, the names cut after a
    few."""
    many = rows.ClassRows(
        "00_x",
        [rows.Row(f"s{i:02}", rows.GRADED, score=0.0, ungraded=["why"]) for i in range(40)],
        [],
        {"why": 2.0, "how": 1.0},
    )
    page = report.page(many, b"")
    assert page.count("<td><code>why</code></td>") == 1 and "<code>how</code>" not in page
    assert "<td>40</td><td>s00, s01, s02 and 37 more</td>" in page


def test_report_refuses_without_a_gradebook(tmp_path, capsys):
    """No gradebook: the report says to grade first."""
    with pytest.raises(SystemExit):
        report.main(["01_verify_gpu", "--course", str(tmp_path)])
    assert "grade first" in capsys.readouterr().err


def test_report_refuses_an_unknown_lesson(course, capsys):
    """A lesson the gradebook does not hold: the report says to grade first."""
    with pytest.raises(SystemExit):
        report.main(["01_verify_gpu", "--course", str(course)])
    assert "grade first" in capsys.readouterr().err


def test_grade_keeps_times(tmp_path, monkeypatch):
    """`make grade` keeps each submission's grading time; a later run for one student keeps the
    others'."""
    for student in ("ann", "ben"):
        (tmp_path / "submitted" / student / ASSIGNMENT).mkdir(parents=True)
    monkeypatch.setattr(table, "_nbgrader", lambda *a: subprocess.CompletedProcess(a, 0, "", ""))
    data = table.grade(tmp_path, ASSIGNMENT, jobs=2, extra=[])
    assert [(r.student, r.status) for r in data.rows] == [
        ("ann", rows.NOT_GRADED),
        ("ben", rows.NOT_GRADED),
    ]
    (tmp_path / "submitted" / "ann" / ASSIGNMENT).rmdir()
    table.grade(tmp_path, ASSIGNMENT, jobs=1, extra=[])  # ben again: ann's time stays
    times = rows.grading_times(tmp_path)
    assert set(times) == {ASSIGNMENT} and set(times[ASSIGNMENT]) == {"ann", "ben"}
    assert all(isinstance(s, float) and s >= 0 for s in times[ASSIGNMENT].values())
    assert not (tmp_path / "gradebook.db").exists(), "reading the rows creates no gradebook"


TEST_CELL = """assert f(1) == 2, "one plus one"
x = 1
### BEGIN HIDDEN TESTS
y = f(2)
assert y == 4, "two plus two"
### END HIDDEN TESTS"""
# What IPython printed for that cell's hidden assertion (nbclient, the pinned stack), colours
# included.
TRACEBACK = [
    "\x1b[31m---------------------------------------------------------------------------\x1b[39m",
    "\x1b[31mAssertionError\x1b[39m                            Traceback (most recent call last)",
    "\x1b[36mCell\x1b[39m\x1b[36m \x1b[39m\x1b[32mIn[2]\x1b[39m\x1b[32m, line 5\x1b[39m\n"
    "\x1b[32m      1\x1b[39m \x1b[38;5;28;01massert\x1b[39;00m "
    "f(\x1b[32m1\x1b[39m) == \x1b[32m2\x1b[39m, "
    '\x1b[33m"one plus one"\x1b[39m\n'
    "\x1b[32m      2\x1b[39m x = \x1b[32m1\x1b[39m\n"
    "\x1b[32m      3\x1b[39m \x1b[38;5;66;03m### BEGIN HIDDEN TESTS\x1b[39;00m\n"
    "\x1b[32m      4\x1b[39m y = f(\x1b[32m2\x1b[39m)\n"
    "\x1b[32m----> \x1b[39m\x1b[32m5\x1b[39m \x1b[38;5;28;01massert\x1b[39;00m "
    "y == \x1b[32m4\x1b[39m, "
    '\x1b[33m"two plus two"\x1b[39m\n'
    "\x1b[32m      6\x1b[39m \x1b[38;5;66;03m### END HIDDEN TESTS\x1b[39;00m\n",
    "\x1b[31mAssertionError\x1b[39m: two plus two",
]


def _failed_hidden_test() -> nbformat.NotebookNode:
    cell = new_code_cell(TEST_CELL, execution_count=2)
    cell.metadata.nbgrader = {"grade": True, "solution": False, "grade_id": "test_f", "points": 1}
    cell.outputs = [
        new_output("error", ename="AssertionError", evalue="two plus two", traceback=TRACEBACK)
    ]
    return new_notebook(cells=[cell])


def test_feedback_hides_hidden_tests():
    """Feedback names a failed hidden test without its code; switched off, it is nbgrader's."""
    (cell,) = HideHiddenTests()(_failed_hidden_test(), {})[0].cells
    shown = cell.source + "\n" + strip_ansi("\n".join(cell.outputs[0].traceback))
    assert (
        "AssertionError: two plus two" in shown
        and "----> 5 (a hidden test: its code is not shown)" in shown
    )
    assert 'assert f(1) == 2, "one plus one"' in shown and "x = 1" in shown, (
        "the visible test stays"
    )
    for line in ("y = f(2)", 'assert y == 4, "two plus two"', "HIDDEN TESTS\n"):
        assert line not in shown, f"{line!r} is hidden code"
    assert HideHiddenTests.note in cell.source

    (cell,) = HideHiddenTests(enabled=False)(_failed_hidden_test(), {})[0].cells
    assert (cell.source, cell.outputs[0].traceback) == (TEST_CELL, TRACEBACK), (
        "switched off: nbgrader's feedback"
    )


@pytest.mark.ci_required
def test_report_in_chromium(course):
    """The class report opens in a real browser from its file, alone, with its plot drawn."""
    reason = browserkit.why_no_browser()
    if reason:
        pytest.skip(reason)
    page_path, _, data = report.write(course, ASSIGNMENT)
    with browserkit.chromium_page() as page:
        asked = []
        page.on("request", lambda request: asked.append(request.url))
        page.goto(page_path.as_uri())
        plot = page.locator("img#scores")
        plot.scroll_into_view_if_needed()
        drawn = plot.evaluate(
            "img => img.complete && img.naturalWidth > 0 ? [img.naturalWidth, img.width] : null"
        )
        heading = page.locator("h1").inner_text()
        browserkit.ARTIFACTS.mkdir(exist_ok=True)
        shot = browserkit.ARTIFACTS / "class-report.png"
        page.screenshot(path=str(shot), full_page=True)
    assert drawn and drawn[1] > 300, (
        f"the score histogram is drawn in the page (natural and shown width: {drawn})"
    )
    assert heading == f"{ASSIGNMENT}: class report"
    assert all(url.startswith(("file:", "data:")) for url in asked), (
        f"the page fetched something else: {asked}"
    )
    print(
        f"\nclass report of {len(data.rows)} submissions: plot {drawn[0]} px wide; "
        f"{shot.relative_to(ck.ROOT)}"
    )
