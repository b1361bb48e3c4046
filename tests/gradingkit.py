"""What the grading tests share: learners' slips (deleted test cells) and the checks of a graded
class.

- ``without_tests``, ``deleted_tests_submission``, ``restored_after``: a submission with every test
  cell (and read-only code cell) deleted, and where autograde put them back
  (tests/grading/test_deleted_cells.py, test_grading.py, test_classroom.py);
- ``check_report``, ``check_feedback``: the class report and the feedback of a class nbgrader
  graded, held to the gradebook (tests/grading/test_classroom.py).
"""

from __future__ import annotations

import csv
import html
import re
from pathlib import Path

import coursekit as ck
import nbformat
from coursetools.course import hidden_lines
from coursetools.grading import report
from coursetools.grading.cells import grade_id
from coursetools.grading.rows import GRADED, first_line
from coursetools.text import strip_ansi


def page_text(page: str) -> str:
    """What a reader of an HTML page sees (tags dropped: syntax highlighting splits code into
    spans)."""
    return html.unescape(re.sub(r"<[^>]+>", "", page))


def without_tests(nb, *, read_only: bool = False):
    """A copy of ``nb`` with every test cell deleted, as a learner might (with ``read_only``, every
    read-only code cell too: a referee's code); and their grade ids."""
    gone = {grade_id(cell) for cell in ck.nbgrader_cells(nb, "test")}
    if read_only:
        gone |= {grade_id(c) for c in ck.nbgrader_cells(nb, "read-only") if c.cell_type == "code"}
    copy = nbformat.from_dict(nb)
    copy.cells = [cell for cell in copy.cells if grade_id(cell) not in gone]
    return copy, gone


def deleted_tests_submission(lesson: str):
    """The solution's answers with every test cell and read-only code cell deleted: it must still
    score full marks."""
    answered = ck.submission_from(ck.read(ck.student_path(lesson)), ck.solution_answers(lesson))
    return without_tests(answered, read_only=True)[0]


def restored_after(graded, released) -> list[str]:
    """Test and read-only code cells of ``graded`` whose cell before is not the one before them in
    ``released``."""
    before = {
        grade_id(c): released.cells[i - 1].id for i, c in enumerate(released.cells) if grade_id(c)
    }
    tests = {grade_id(c) for c in ck.nbgrader_cells(graded, "test")}
    tests |= {grade_id(c) for c in ck.nbgrader_cells(graded, "read-only") if c.cell_type == "code"}
    return [
        grade_id(c)
        for i, c in enumerate(graded.cells)
        if grade_id(c) in tests
        and grade_id(c) in before
        and graded.cells[i - 1].id != before[grade_id(c)]
    ]


def check_report(course: Path, lesson: str):
    """Build the report of ``lesson`` from ``course``'s gradebook; its numbers are the ones nbgrader
    holds."""
    page_path, csv_path, data = report.write(course, lesson)
    notebook = ck.solution_path(lesson).stem
    students = sorted(p.name for p in (course / "autograded").iterdir())
    held = {s: ck.scores(course, lesson, s) for s in students}
    rows = {row["student"]: row for row in csv.DictReader(csv_path.open())}
    assert sorted(rows) == students, "one row per submission"
    assert {row["status"] for row in rows.values()} == {GRADED}
    for student, grades in held.items():
        assert float(rows[student]["score"]) == sum(s or 0 for s, _, _ in grades.values()), student
        assert float(rows[student]["max_score"]) == sum(p for _, p, _ in grades.values()), student
        waiting = {g for g, (_, _, manual) in grades.items() if manual}
        assert set(rows[student]["ungraded"].split()) == waiting, student
    tests = [grade_id(c) for c in ck.nbgrader_cells(ck.read(ck.solution_path(lesson)), "test")]
    summaries = report.cell_summaries(data)
    assert [t.label for t in summaries] == tests, "every test cell, in the notebook's order"
    for t in summaries:
        passed = [s for s in students if held[s][t.label][0] == held[s][t.label][1]]
        points = held[students[0]][t.label][1]
        assert (t.passed, t.submissions, t.points) == (len(passed), len(students), points), t.label
        assert sum(t.failures.values()) == len(students) - len(passed), f"{t.label}: a message each"
        for message, who in t.who.items():
            for student in who:
                graded = ck.read(course / "autograded" / student / lesson / f"{notebook}.ipynb")
                (cell,) = [c for c in graded.cells if grade_id(c) == t.label]
                error = next(o for o in cell.outputs if o.output_type == "error")
                assert message == first_line(error), (
                    f"{student}'s {t.label}: the error's first line"
                )
    ungraded = {(s, g) for s in students for g, (_, _, manual) in held[s].items() if manual}
    waiting = report.waiting(data)
    assert {(s, g) for g, who in waiting.items() for s in who} == ungraded and ungraded
    text = page_text(page_path.read_text())
    scores = [float(rows[s]["score"]) for s in students]
    assert f"{len(students)} submissions graded; mean {sum(scores) / len(scores):.2f}" in text
    assert f"{len(ungraded)} written answers still wait for a person" in text
    assert "Not timed" in text, "graded with a plain nbgrader autograde: no times"
    return data


def _hidden_lines(lesson: str) -> list[str]:
    """Lines of the lesson's hidden tests a reader would recognise: long enough (")" is everywhere)
    and not part of what the released notebook shows anyway (a visible test may hold the same
    `"tf32": False,`)."""
    released = "\n".join(cell.source for cell in ck.read(ck.student_path(lesson)).cells)
    tests = ck.nbgrader_cells(ck.read(ck.solution_path(lesson)), "test")
    hidden = [line.strip() for cell in tests for line in hidden_lines(cell.source)]
    return [line for line in hidden if len(line) >= 10 and line not in released]


def check_feedback(course: Path, lesson: str, student: str) -> None:
    """``student`` failed a hidden test: the feedback nbgrader generated names the failure and shows
    none of the hidden tests' lines; generated again with ``--HideHiddenTests.enabled=False``, it
    shows them."""
    name = ck.solution_path(lesson).stem
    hidden = _hidden_lines(lesson)
    graded = ck.read(course / "autograded" / student / lesson / f"{name}.ipynb")
    failed_hidden = []
    for cell in ck.nbgrader_cells(graded, "test"):
        errors = [o for o in cell.outputs if o.output_type == "error"]
        lines = strip_ansi("\n".join(errors[0].traceback)).splitlines() if errors else []
        arrow = [line for line in lines if line.startswith("---->")]
        if arrow and any(h in arrow[-1] for h in hidden):
            failed_hidden.append(first_line(errors[0]))
    assert failed_hidden, f"{student} fails a hidden test"
    for who in sorted(p.name for p in (course / "feedback").iterdir()):
        text = page_text((course / "feedback" / who / lesson / f"{name}.html").read_text())
        shown = [line for line in hidden if line in text]
        assert not shown, f"{who}'s feedback shows hidden test code: {shown[:3]}"
        if who == student:
            assert all(message in text for message in failed_hidden), (
                "the failed hidden test is named"
            )
            assert "(a hidden test: its code is not shown)" in text
    switch = [
        "--HideHiddenTests.enabled=False",
        "--CourseDirectory.feedback_directory=feedback-shown",
    ]
    args = ["generate_feedback", lesson, f"--student={student}", "--force", *switch]
    switched = ck.nbgrader(course, *args, check=False)
    assert switched.returncode == 0, switched.stderr
    text = page_text((course / "feedback-shown" / student / lesson / f"{name}.html").read_text())
    assert all(line in text for line in hidden), (
        "with the switch off, the feedback shows the hidden tests"
    )
