"""The classroom loop, end to end, as an instructor runs it from the README (lesson 01, a class of
six).

In a scratch folder: the course (its own nbgrader_config.py, unchanged), an nbgrader exchange, and
three home folders, each with its own ``~/.jupyter/nbgrader_config.py`` naming the exchange and the
course, as a JupyterHub admin would set it up (the students' files also give their ids).

    instructor  generate_assignment, release_assignment
    alice       fetch_assignment, answers everything as the solution does, validate, submit
    bob         fetch_assignment, answers as tests/fixtures/01_verify_gpu/partly_right.py, submit
    instructor  collect; the rest of the class handed in outside the exchange (copied into
                submitted/, as nbgrader allows): "untouched" (the student notebook as released)
                and one student per other right- or wrong-answer fixture of lesson 01, named after
                it, right_other_ways with every test cell deleted; autograde, scores alice's and
                bob's written answers by hand (nbgrader's gradebook API, as the formgrader does),
                generate_feedback, release_feedback (alice's and bob's), export
    bob         fetch_feedback

Autograde is held to what test_grading.py::test_autograde asserts for every other lesson
(coursekit.autograde_problems): the solution scores full marks, the untouched notebook 0 without
crashing the grader, each fixture loses exactly the points of its answers' test cells, written
answers wait for the instructor, no submission is changed, and no cell of the solution warns; the
student who deleted every test cell keeps full marks and gets them back where they were
(gradingkit.restored_after). Then the scores in the gradebook and grades.csv, and bob's feedback
names the test cells he failed. The class report built from this gradebook agrees with it, and no
feedback shows a line of the hidden tests unless the instructor's switch says so
(gradingkit.check_report and check_feedback). The commands run are written to
test-artifacts/classroom-commands.txt. The class table's speed-up column (lesson 09) is checked
over the gradebook of test_grading.py::test_autograde[09_make_it_fast].
"""

from __future__ import annotations

import csv
import re
import shlex
import subprocess
import sys
import time
from pathlib import Path

import coursekit as ck
import gradingkit as gk
import nbformat
import pytest
from coursetools.grading.rows import SPEEDUP, SPEEDUP_CELL

LESSON = ck.CLASSROOM_LESSON
COURSE_ID = re.search(r'course_id = "([^"]+)"', (ck.ROOT / "nbgrader_config.py").read_text()).group(
    1
)
PARTLY_WRONG = "partly_right"  # tests/fixtures/01_verify_gpu/partly_right.py
# handed in with every test cell deleted: full marks all the same, the tests back in their places
DELETED_TESTS = "right_other_ways"
HIDDEN_FAILURE = (
    "skips_and_units"  # passes the visible tests of test_gpu_features, fails its hidden ones
)
MANUAL = {
    "alice": (2, None),
    "bob": (
        1,
        "Right about the launch; now say how you would synchronize before reading the clock.",
    ),
}


class Classroom:
    """The people and folders of one class; every nbgrader command runs as one of them and is
    recorded."""

    def __init__(self, tmp: Path):
        self.tmp = tmp
        self.exchange = tmp / "exchange"
        self.exchange.mkdir()
        self.exchange.chmod(0o777)  # nbgrader's exchange: one folder every user can write
        self.course = ck.copy_course(tmp / "instructor" / "course")
        self.log: list[str] = []
        for who in ("instructor", "alice", "bob"):
            lines = [
                f"c.CourseDirectory.course_id = {COURSE_ID!r}",
                f"c.Exchange.root = {str(self.exchange)!r}",
            ]
            if who != "instructor":
                # on JupyterHub: the user name
                lines.append(f"c.CourseDirectory.student_id = {who!r}")
                (self.home(who) / "work").mkdir(parents=True)
            config = self.home(who) / ".jupyter" / "nbgrader_config.py"
            config.parent.mkdir(parents=True)
            config.write_text("c = get_config()  # noqa: F821\n" + "\n".join(lines) + "\n")

    def home(self, who: str) -> Path:
        return self.tmp / who

    def workdir(self, who: str) -> Path:
        return self.course if who == "instructor" else self.home(who) / "work"

    def nbgrader(self, who: str, *args: str) -> str:
        env = ck.env()
        for name in (
            "JUPYTER_CONFIG_DIR",
            "JUPYTER_DATA_DIR",
            "JUPYTER_RUNTIME_DIR",
            "JUPYTER_PLATFORM_DIRS",
            "GPUCOURSE_REQUIRE_GPU",
        ):
            env.pop(name, None)
        env["HOME"] = str(self.home(who))
        started = time.monotonic()
        switch = ck.sandbox_switch() if args[0] == "autograde" else []
        if args[0] == "autograde":
            env["PYTHONWARNINGS"] = ck.WARNINGS_ON
        result = subprocess.run(
            [sys.executable, "-m", "nbgrader", *args, *switch],
            cwd=self.workdir(who),
            env=env,
            capture_output=True,
            text=True,
        )
        self.log.append(
            f"{who:>10}$ nbgrader {shlex.join(args):<45} # {time.monotonic() - started:.0f} s"
        )
        assert result.returncode == 0, (
            f"{who}: nbgrader {shlex.join(args)} failed:\n{result.stdout}\n{result.stderr}"
        )
        return result.stdout + result.stderr

    def note(self, who: str, what: str) -> None:
        self.log.append(f"{who:>10}# {what}")


def _answers(student: str) -> tuple[dict[str, str], set[str]]:
    """What the student types into the answer cells, and the exercises they get wrong."""
    answers = ck.solution_answers(LESSON)
    if student == "alice":
        return answers, set()
    (fixture,) = [f for f in ck.fixtures(LESSON) if f.name == PARTLY_WRONG]
    return {**answers, **fixture.answers}, set(fixture.answers)


def _feedback_scores(html: str) -> dict[str, tuple[float, float]]:
    """grade_id -> (score, points) of each test cell, as the feedback page shows them."""
    found = re.findall(
        r"Grade cell: <code>(\w+)</code>.*?Score: ([\d.]+) / ([\d.]+)", html, flags=re.S
    )
    return {grade_id: (float(score), float(points)) for grade_id, score, points in found}


@pytest.mark.slow
def test_classroom_loop(tmp_path):
    """Release, fetch, validate, submit, collect, autograde, grade by hand, feedback, export,
    report."""
    room = Classroom(tmp_path)
    notebook = ck.solution_path(LESSON).name
    source = ck.read(ck.solution_path(LESSON))
    answer_ids = [c.metadata.nbgrader.grade_id for c in ck.nbgrader_cells(source, "answer")]
    tests = {
        c.metadata.nbgrader.grade_id: c.metadata.nbgrader.points
        for c in ck.nbgrader_cells(source, "test")
    }
    (written,) = [c.metadata.nbgrader for c in ck.nbgrader_cells(source, "written")]

    room.nbgrader("instructor", "generate_assignment", LESSON, "--force")
    room.nbgrader("instructor", "release_assignment", LESSON)
    assert (room.exchange / COURSE_ID / "outbound" / LESSON / notebook).exists()

    for student in ("alice", "bob"):
        room.nbgrader(student, "fetch_assignment", LESSON)
        fetched = room.workdir(student) / LESSON / notebook
        assert fetched.read_bytes() == ck.student_path(LESSON).read_bytes(), (
            "students get the committed notebooks/"
        )
        room.note(student, f"answers the exercises in {LESSON}/{notebook} and saves it")
        nbformat.write(ck.submission_from(ck.read(fetched), _answers(student)[0]), fetched)
        if student == "alice":  # the assignment list's Validate button, before she submits
            said = room.nbgrader(student, "validate", f"{LESSON}/{notebook}")
            assert "Success! Your notebook passes all the tests." in said, said
        room.nbgrader(student, "submit", LESSON)

    room.nbgrader("instructor", "collect", LESSON)
    submitted = {}
    for student in ("alice", "bob"):
        path = room.course / "submitted" / student / LESSON / notebook
        assert path.exists(), f"{student}'s work was collected"
        submitted[student] = (path, path.read_bytes(), _answers(student)[1])
    room.note(
        "instructor",
        "copies the rest of the class's notebooks (and their time stamps) into submitted/",
    )
    released, solution = ck.read(ck.student_path(LESSON)), ck.solution_answers(LESSON)
    # as collect writes it
    stamp = (room.course / "submitted" / "alice" / LESSON / "timestamp.txt").read_text()
    rest = {"untouched": (released, None)}
    for fixture in ck.fixtures(LESSON):
        if fixture.name != PARTLY_WRONG:
            nb = ck.submission_from(released, {**solution, **fixture.answers})
            if fixture.name == DELETED_TESTS:
                nb = gk.without_tests(nb)[0]
            rest[fixture.name] = (nb, fixture.wrong)
    assert rest.get(DELETED_TESTS, (None, None))[1] == set(), f"{DELETED_TESTS} is a right answer"
    for student, (nb, wrong) in rest.items():
        path = ck.submit(room.course, student, LESSON, nb)
        (path.parent / "timestamp.txt").write_text(stamp)  # release_feedback reads it
        submitted[student] = (path, path.read_bytes(), wrong)
    room.nbgrader("instructor", "autograde", LESSON)
    problems = ck.autograde_problems(room.course, LESSON, submitted)
    graded = ck.read(room.course / "autograded" / DELETED_TESTS / LESSON / notebook)
    problems += [
        f"{DELETED_TESTS}: its deleted {cell} came back in the wrong place"
        for cell in gk.restored_after(graded, released)
    ]
    assert not problems, "\n".join(problems)
    warning = ck.cell_warning(room.course / "autograded" / "alice" / LESSON / notebook)
    assert not warning, f"a solution cell warns: {warning}"

    # The written answer, graded by hand: what the formgrader's "Save" does (nbgrader's
    # GradeHandler.put).
    from nbgrader.api import Gradebook

    room.note("instructor", "grades the written answers in the formgrader")
    with Gradebook(f"sqlite:///{room.course / 'gradebook.db'}") as gb:
        for student, (score, comment) in MANUAL.items():
            grade = gb.find_grade(written.grade_id, Path(notebook).stem, LESSON, student)
            assert grade.needs_manual_grade, "the written answer waits for the instructor"
            grade.manual_score = score
            grade.needs_manual_grade = False
            if comment:
                gb.find_comment(
                    written.grade_id, Path(notebook).stem, LESSON, student
                ).manual_comment = comment
        gb.db.commit()

    room.nbgrader("instructor", "generate_feedback", LESSON)
    # the rest of the class did not hand in through the exchange: no feedback there
    for student in ("alice", "bob"):
        room.nbgrader("instructor", "release_feedback", LESSON, f"--student={student}")
    room.nbgrader("instructor", "export")
    room.nbgrader("bob", "fetch_feedback", LESSON)
    artifacts = ck.ROOT / "test-artifacts"
    artifacts.mkdir(exist_ok=True)
    (artifacts / "classroom-commands.txt").write_text("\n".join(room.log) + "\n")

    rows = {row["student_id"]: row for row in csv.DictReader((room.course / "grades.csv").open())}
    total = sum(tests.values()) + written.points
    for student, (manual, comment) in MANUAL.items():
        wrong = {t for t in tests if ck.answer_of(t, answer_ids) in _answers(student)[1]}
        expected = {t: (0.0 if t in wrong else float(points)) for t, points in tests.items()}
        got = ck.scores(room.course, LESSON, student)
        assert {t: got[t][0] for t in tests} == expected, f"{student}'s autograded scores"
        assert (
            got[written.grade_id][:2] == (manual, written.points) and not got[written.grade_id][2]
        )
        score = sum(expected.values()) + manual
        assert (
            float(rows[student]["score"]) == score and float(rows[student]["max_score"]) == total
        ), rows[student]

        html = (
            room.course / "feedback" / student / LESSON / notebook.replace(".ipynb", ".html")
        ).read_text()
        assert f"(Score: {score:.1f} / {total:.1f})" in html, (
            f"{student}'s feedback shows the total"
        )
        assert _feedback_scores(html) == {t: (expected[t], float(p)) for t, p in tests.items()}, (
            f"{student}'s feedback names each test cell with its score"
        )
        if comment:
            assert comment in html, "the instructor's comment reaches the student"
    assert {"test_visible_gpu_count", "test_matmul_tflops"} == {
        t for t, (s, _) in _feedback_scores(html).items() if s == 0
    }
    assert "unset: every GPU is visible" in html, "bob sees why the visible test failed"
    (fetched,) = (room.workdir("bob") / LESSON / "feedback").glob(
        f"*/{notebook.replace('.ipynb', '.html')}"
    )
    assert fetched.read_text() == html, "bob fetched his feedback through the exchange"
    # The class report from this gradebook, and feedback that names a failed hidden test without
    # showing its code.
    gk.check_report(room.course, LESSON)
    gk.check_feedback(room.course, LESSON, HIDDEN_FAILURE)
    print("\n" + "\n".join(room.log))
    print({student: (rows[student]["score"], rows[student]["max_score"]) for student in MANUAL})


def test_lesson_09_measures_in_a_locked_cell():
    """Lesson 09's ratio is printed by one locked cell, `measure_speedup`, the only output the class
    table reads: autograde gives a locked cell its source's code back, so a learner's edit cannot
    set a rank."""
    source = ck.read(ck.solution_path("09_make_it_fast"))
    cells = [
        c for c in source.cells if c.metadata.get("nbgrader", {}).get("grade_id") == SPEEDUP_CELL
    ]
    assert len(cells) == 1, f"lesson 09 has one cell with grade_id {SPEEDUP_CELL!r}"
    (cell,) = cells
    meta = cell.metadata.nbgrader
    assert meta.get("locked") and not meta.get("grade") and not meta.get("solution"), meta
    assert "fast_train speed-up over the baseline: {" in cell.source, (
        "it prints the line the table reads"
    )
    assert SPEEDUP.search("fast_train speed-up over the baseline: 1.31x on cpu")
