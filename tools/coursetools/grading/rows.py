"""``class_rows(course, lesson)``: one walk of the gradebook, autograded/ and the grading times, one
row per student.

The class table (``table``) and the class report (``report``) are two renderings of these rows.
Scores come from the gradebook through nbgrader's own API, so they are the scores the Formgrader and
``nbgrader export`` show, hand-graded answers included; the rest (error messages, timeouts, the
lesson 09 speed-up) from the autograded notebooks.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path

from coursetools.grading.cells import DIED, NOT_RUN, TIMEOUT, grade_id
from coursetools.text import strip_ansi

# the class reports' folder; the grading times it keeps
REPORTS, TIMES = "reports", "grading-times.json"
GRADED, NOT_GRADED, UNREADABLE = "graded", "not graded", "could not be read"
NO_ERROR = "(no error shown: the cell ran but scored below its points)"
# Lesson 09: its locked cell `measure_speedup` prints this line; the ratio is shown beside the
# score, never graded.
SPEEDUP_CELL = "measure_speedup"
SPEEDUP = re.compile(r"fast_train speed-up over the baseline: ([0-9.]+)x")


@dataclass
class Test:
    """A test cell of the assignment (``label``: its grade id, prefixed by its notebook where there
    are several)."""

    label: str
    points: float


@dataclass
class Row:
    """One student's submission of the lesson."""

    student: str
    status: str = NOT_GRADED  # GRADED, NOT_GRADED (not in the gradebook) or UNREADABLE
    why: str = ""  # UNREADABLE: what autograde could not read; NOT_GRADED: why no score
    score: float | None = None  # the gradebook's total, hand-graded answers included
    max_score: float = 0.0
    waiting: float = 0.0  # points of the written answers still waiting for a person
    cells: dict[str, float] = field(default_factory=dict)  # test label -> score
    failed: list[str] = field(default_factory=list)  # test labels scored below their points
    # failed test label -> its error's first line
    messages: dict[str, str] = field(default_factory=dict)
    ungraded: list[str] = field(default_factory=list)  # written answers waiting for a person
    timed_out: list[str] = field(default_factory=list)
    kernel_died: list[str] = field(default_factory=list)
    not_run: list[str] = field(default_factory=list)
    seconds: float | None = None  # as `make grade` measured it
    speedup: float | None = None  # lesson 09's measured ratio
    flags: list[str] = field(default_factory=list)  # answer cells that rebind the referee


# error name -> Row field
INCIDENTS = {
    TIMEOUT: "timed_out",
    DIED: "kernel_died",
    NOT_RUN: "not_run",
}


@dataclass
class ClassRows:
    """The lesson's rows, its test cells (in the notebook's order) and written answers (label ->
    points)."""

    lesson: str
    rows: list[Row]
    tests: list[Test]
    written: dict[str, float]

    @property
    def max_score(self) -> float:
        return max((r.max_score for r in self.rows), default=0.0)


def grading_times(course: Path) -> dict[str, dict[str, float]]:
    """lesson -> student -> seconds `make grade` took for the submission, as its last run for them
    measured."""
    path = course / REPORTS / TIMES
    return json.loads(path.read_text()) if path.exists() else {}


def first_line(output) -> str:
    """An error output's first line: `ename: evalue`, without colours."""
    evalue = strip_ansi(str(output.get("evalue", ""))).strip()
    ename = str(output.get("ename", "Error"))
    return f"{ename}: {evalue.splitlines()[0]}" if evalue else ename


def speedup(nb) -> float | None:
    """The ratio lesson 09's locked cell ``measure_speedup`` printed, else None; no other cell's
    output counts."""
    found = [
        float(m.group(1))
        for cell in nb.cells
        if grade_id(cell) == SPEEDUP_CELL
        for output in cell.get("outputs", [])
        if output.get("output_type") == "stream"
        for m in SPEEDUP.finditer(output.get("text", ""))
    ]
    return found[-1] if found else None


def submission_flags(folder: Path) -> list[str]:
    """Where a submission's answer cells rebind what the tests judge with (grading.referee), each
    ``"<notebook> <grade id> line <n>: <what>"``; an unreadable notebook has none."""
    import nbformat

    from coursetools.grading.referee import flags

    found = []
    for path in sorted(folder.glob("*.ipynb")):
        try:
            nb = nbformat.read(path, as_version=4)
        except Exception:  # noqa: BLE001 (unreadable: its row says so)
            continue
        found += [f"{path.stem} {flag}" for flag in flags(nb)]
    return found


def unreadable(path: Path) -> str:
    """Why autograde could not read a submitted notebook, in a few words."""
    import nbformat

    if not path.exists():
        return "no notebook"
    if not path.read_bytes().strip():
        return "an empty file"
    try:
        nbformat.read(path, as_version=4)
    except Exception as error:  # noqa: BLE001 (any reason nbformat gives is the answer)
        if isinstance(error, nbformat.reader.NotJSONError):
            return "not a notebook"
        return f"not a valid notebook ({type(error).__name__})"
    return "autograde failed on it (nbgrader's log says why)"


def _read_graded(row: Row, graded: Path, label) -> list[str]:
    """Fill ``row`` from an autograded notebook: incidents, error messages, speed-up; its grade ids
    in order."""
    import nbformat

    nb = nbformat.read(graded, as_version=4)
    order = []
    for index, cell in enumerate(nb.cells):
        name = grade_id(cell)
        order += [name] if name else []
        errors = [o for o in cell.get("outputs", []) if o.get("output_type") == "error"]
        if errors and name:
            row.messages[label(name)] = first_line(errors[0])
        for output in errors:
            if output.get("ename") in INCIDENTS:
                getattr(row, INCIDENTS[output.ename]).append(name or f"cell {index}")
    ratio = speedup(nb)
    row.speedup = ratio if ratio is not None else row.speedup
    return order


def class_rows(course: Path, lesson: str) -> ClassRows:
    """Every submission of ``lesson`` in ``course``: the gradebook's, and those in submitted/ it
    does not hold."""
    from nbgrader.api import Gradebook, MissingEntry

    times = grading_times(course).get(lesson, {})
    submitted = {p.parent.name for p in (course / "submitted").glob(f"*/{lesson}") if p.is_dir()}
    rows, tests, written, order = {}, {}, {}, []
    database = course / "gradebook.db"
    with Gradebook(f"sqlite:///{database}") if database.exists() else _NoGradebook() as gb:
        try:
            assignment = gb.find_assignment(lesson)
        except MissingEntry:
            assignment = None
        notebooks = list(assignment.notebooks) if assignment else []

        def label(notebook: str, name: str) -> str:
            return name if len(notebooks) == 1 else f"{notebook}/{name}"

        for nb in notebooks:
            answers = {cell.name for cell in nb.solution_cells}
            for cell in nb.grade_cells:
                kind = written if cell.name in answers else tests
                kind[label(nb.name, cell.name)] = cell.max_score
        for submission in gb.assignment_submissions(lesson) if assignment else []:
            row = rows[submission.student_id] = Row(submission.student_id, status=GRADED, score=0.0)
            for notebook in submission.notebooks:
                folder = Path(submission.student_id) / lesson / f"{notebook.name}.ipynb"
                graded = course / "autograded" / folder
                readable = graded.exists()
                if readable:
                    names = _read_graded(row, graded, lambda n, nb=notebook.name: label(nb, n))
                    order += [
                        label(notebook.name, n)
                        for n in names
                        if label(notebook.name, n) not in order
                    ]
                else:
                    row.status, row.why = UNREADABLE, unreadable(course / "submitted" / folder)
                for g in notebook.grades:
                    name = label(notebook.name, g.name)
                    row.max_score += g.max_score
                    row.score += g.score or 0
                    if not readable:
                        continue
                    if name in written and g.needs_manual_grade:
                        row.ungraded.append(name)
                        row.waiting += g.max_score
                    if name in tests:
                        row.cells[name] = float(g.score or 0)
                        if (g.score or 0) < g.max_score:
                            row.failed.append(name)
                            row.messages.setdefault(name, NO_ERROR)
            row.messages = {k: v for k, v in row.messages.items() if k in row.failed}
    for student in submitted - set(rows):
        rows[student] = Row(student)
    for student, row in rows.items():
        row.seconds = times.get(student)
        row.flags = submission_flags(course / "submitted" / student / lesson)
    rank = {name: i for i, name in enumerate(order)}
    ordered = sorted(tests, key=lambda name: (rank.get(name, len(rank)), name))
    return ClassRows(
        lesson, [rows[s] for s in sorted(rows)], [Test(n, tests[n]) for n in ordered], written
    )


class _NoGradebook:
    """No gradebook yet: no assignment (and no database created by looking)."""

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def find_assignment(self, lesson):
        from nbgrader.api import MissingEntry

        raise MissingEntry()
