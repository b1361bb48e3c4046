"""What the course tests share: the lessons, their cells, and nbgrader runs in a scratch course."""

from __future__ import annotations

import ast
import functools
import importlib.util
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from dataclasses import dataclass
from pathlib import Path

import nbformat
import tomllib
from coursetools import course as model
from coursetools import notebooks as make_notebooks
from coursetools.course import (  # noqa: F401 (the course's model, for every test)
    CHECKED,
    ROOT,
    answer_of,
    lessons,
    solution_path,
    student_path,
)
from coursetools.course import cells_of as nbgrader_cells
from coursetools.grading.cells import PUT_BACK
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

FIXTURES = ROOT / "tests" / "fixtures"
# autograded in tests/grading/test_classroom.py, so test_autograde leaves it out
CLASSROOM_LESSON = "01_verify_gpu"
# A DeprecationWarning or FutureWarning raised in a graded notebook's cell (or in gpucourse), as
# autograde records it.
CELL_WARNING = re.compile(
    r"(ipykernel_\d+|gpucourse)[^\n]*:\d+: (DeprecationWarning|FutureWarning)"
)
# PYTHONWARNINGS while grading: show them all
WARNINGS_ON = "default::DeprecationWarning,default::FutureWarning"


def read(path: Path):
    return nbformat.read(path, as_version=4)


def code_cell(lesson: str, needle: str) -> str:
    """The source of the one code cell of a lesson's solution that contains ``needle``."""
    cells = read(solution_path(lesson)).cells
    found = [c.source for c in cells if c.cell_type == "code" and needle in c.source]
    assert len(found) == 1, f"{lesson}: {len(found)} code cells contain {needle!r}"
    return found[0]


def gpu_check(lesson: str, title: str) -> str:
    """The source of the lesson's one `gpu-check` cell whose first line holds ``title``."""
    cells = read(solution_path(lesson)).cells
    found = [
        c.source
        for c in cells
        if "gpu-check" in c.metadata.get("tags", []) and title in c.source.splitlines()[0]
    ]
    assert len(found) == 1, f"{lesson}: one GPU check titled {title!r}, found {len(found)}"
    return found[0]


class DriftingClock:
    """A clock on which each run takes ``drift`` times longer than the one before (a T4 throttling
    as it warms): call it, or read ``perf_counter()``, for the time; ``run(seconds)`` is a step."""

    def __init__(self, drift: float):
        self.now, self.factor, self.drift = 0.0, 1.0, drift

    def __call__(self) -> float:
        return self.now

    def perf_counter(self) -> float:
        return self.now

    def run(self, seconds: float):
        def step():
            self.now += seconds * self.factor
            self.factor *= self.drift

        return step


def repository_url() -> str:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["urls"]["Repository"]


def locked_ids(lesson: str) -> set[str]:
    """Grade ids of the lesson's read-only cells that are neither answers nor tests (a referee's
    code)."""
    cells = nbgrader_cells(read(solution_path(lesson)), "read-only")
    return {model.grade_id(cell) for cell in cells}


@dataclass
class Fixture:
    """Replacement sources for some cells of a lesson (tests/fixtures/<lesson>/<name>.py).

    A fixture named ``right_*`` holds right answers written another natural way: it keeps full
    marks. Any other fixture holds wrong answers: it loses exactly the points of the test cells of
    the answers it names. A fixture may also edit read-only (locked) cells, as a learner gaming the
    referee would: autograde restores them, and they cost no points of their own.
    """

    lesson: str
    name: str
    answers: dict[str, str]

    @property
    def right(self) -> bool:
        return self.name.startswith("right_")

    @property
    def wrong(self) -> set[str]:
        """The answers it gets wrong (none for a right fixture; never a read-only cell)."""
        return set() if self.right else set(self.answers) - locked_ids(self.lesson)


def fixtures(
    lesson: str | None = None, *, cuda: bool = False, flagged: bool = False
) -> list[Fixture]:
    """tests/fixtures/<lesson>/<name>.py, cells separated by `# %% <grade_id>` lines; with ``cuda``,
    tests/fixtures/<lesson>/cuda/<name>.py: mistakes only CUDA shows (a GPU grader, the CUDA
    rehearsal), which a CPU grader passes; with ``flagged``, tests/fixtures/<lesson>/flagged/:
    answers that patch the referee, which the class report flags (tests/grading/test_referee.py)."""
    found = []
    folder = "cuda/" if cuda else "flagged/" if flagged else ""
    for path in sorted(FIXTURES.glob(f"{lesson or '*'}/{folder}*.py")):
        parts = re.split(r"^# %% (\S+)[^\n]*\n", path.read_text(), flags=re.M)
        sections = zip(parts[1::2], parts[2::2], strict=True)
        answers = {grade_id: source.strip("\n") for grade_id, source in sections}
        owner = path.parent.parent if folder else path.parent
        found.append(Fixture(owner.name, path.stem, answers))
    return found


def submission_from(student_nb, answers: dict[str, str]):
    """A copy of the student notebook with some answer cells filled in."""
    nb = nbformat.from_dict(student_nb)
    ids = {cell.metadata.get("nbgrader", {}).get("grade_id"): cell for cell in nb.cells}
    for grade_id, source in answers.items():
        if grade_id not in ids:
            raise KeyError(f"fixture names {grade_id!r}, which is not a cell of this lesson")
        ids[grade_id].source = source
    return nb


def solution_answers(lesson: str) -> dict[str, str]:
    """The solution's source of every answer cell, with nbgrader's markers removed."""
    nb = read(solution_path(lesson))
    cells = nbgrader_cells(nb, "answer") + nbgrader_cells(nb, "written")
    return {model.grade_id(cell): model.without_markers(cell.source) for cell in cells}


def autograde_problems(
    course: Path,
    lesson: str,
    submitted: dict[str, tuple[Path, bytes, set[str] | None]],
    unscorable: set[str] | frozenset[str] = frozenset(),
) -> list[str]:
    """What autograde got wrong for ``submitted`` (student -> (file, its bytes before, the answers
    it gets wrong; None: untouched)): each test cell scores full marks, or 0 where its answer is
    wrong (every cell when untouched) or where it is ``unscorable`` here (gap_expectations), a
    written answer waits for the instructor (an unanswered one scores 0 by itself), and no
    submission is changed."""
    source = read(solution_path(lesson))
    answer_ids = [c.metadata.nbgrader.grade_id for c in nbgrader_cells(source, "answer")]
    problems = []
    for student, (path, before, wrong) in submitted.items():
        if path.read_bytes() != before:
            problems.append(f"{student}: the grader changed the submission")
        got = scores(course, lesson, student)
        for cell in nbgrader_cells(source, "test"):
            grade_id = cell.metadata.nbgrader.grade_id
            score, max_score, _ = got[grade_id]
            lost = (
                wrong is None or grade_id in unscorable or answer_of(grade_id, answer_ids) in wrong
            )
            expected = 0 if lost else max_score
            if score != expected:
                problems.append(
                    f"{student}: test cell {grade_id} scored {score}, expected {expected}"
                )
        for cell in nbgrader_cells(source, "written"):
            score, _, needs_manual = got[cell.metadata.nbgrader.grade_id]
            if wrong is None and (score != 0 or needs_manual):
                problems.append(f"{student}: an unanswered written question must score 0 by itself")
            if wrong is not None and not needs_manual:
                problems.append(
                    f"{student}: the written answer {cell.metadata.nbgrader.grade_id} "
                    "must wait for the instructor"
                )
    return problems


# ---- what a grading machine lacks, and the grades that follow from it ----

DALI, COMPILER = "DALI", "a C compiler"


def machine_gaps(
    *, which=shutil.which, find_spec=importlib.util.find_spec, environ=os.environ, include=None
) -> dict[str, str]:
    """What this machine lacks that graded cells need: {DALI or COMPILER: why}. DALI: lesson 05's
    DALI exercises cannot run. A C compiler with Python.h: Triton builds Inductor's GPU kernels'
    launcher with them, finding the compiler as Triton does (and lesson 08's check): $CC when set,
    else gcc or clang. ``include``: where Python.h should be (by default python_include())."""
    gaps = {}
    try:
        dali = find_spec("nvidia.dali")
    except ModuleNotFoundError:  # no nvidia namespace at all
        dali = None
    if dali is None:
        gaps[DALI] = "DALI is not installed on this machine"
    named = environ.get("CC")  # Triton takes $CC whenever it is set, even empty
    if not any(name and which(name) for name in (["gcc", "clang"] if named is None else [named])):
        gaps[COMPILER] = "no C compiler" + ("" if named is None else f" ($CC={named!r})")
    elif not (Path(include := include or python_include()) / "Python.h").is_file():
        gaps[COMPILER] = f"no Python.h in {include}"
    return gaps


def python_include() -> str:
    """Where Triton looks for Python.h (it reads Debian's posix_local scheme as posix_prefix)."""
    scheme = sysconfig.get_default_scheme()
    return sysconfig.get_paths("posix_prefix" if scheme == "posix_local" else scheme)["include"]


def calls_inductor(source: str) -> bool:
    """Whether ``source`` calls torch.compile with Inductor, which needs a C compiler: no backend
    named, or "inductor". A backend its caller passes in (``backend=backend``) is the caller's: the
    tests of lesson 08 pass their own, which compile nothing."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return "torch.compile(" in source
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and ast.unparse(node.func) == "torch.compile":
            backend = [k.value for k in node.keywords if k.arg == "backend"]  # keyword-only
            if not backend or getattr(backend[0], "value", None) == "inductor":
                return True
    return False


def gap_expectations(lesson: str, gaps: dict[str, str]) -> tuple[dict[str, str], dict[str, str]]:
    """What ``gaps`` (machine_gaps()) change in a lesson's grading: (test cells that score 0 for
    every submission, fixtures that cannot be judged), each {name: the gap}, in notebook and file
    order. Without DALI, every test cell that asserts NO_DALI; without a C compiler, every fixture
    whose answers call torch.compile with Inductor."""
    cells, left_out = {}, {}
    if DALI in gaps:
        for cell in nbgrader_cells(read(solution_path(lesson)), "test"):
            if "NO_DALI" in cell.source:
                cells[cell.metadata.nbgrader.grade_id] = DALI
    if COMPILER in gaps:
        for fixture in fixtures(lesson) + fixtures(lesson, cuda=True):
            if any(calls_inductor(source) for source in fixture.answers.values()):
                left_out[fixture.name] = COMPILER
    return cells, left_out


def locked_problems(course: Path, lesson: str, students: list[str]) -> list[str]:
    """Read-only cells of ``students``' autograded notebooks whose code is not the source's."""
    source = {
        cell.metadata.nbgrader.grade_id: cell.source
        for cell in read(solution_path(lesson)).cells
        if cell.metadata.get("nbgrader", {}).get("grade_id") in locked_ids(lesson)
    }
    problems = []
    for student in students:
        graded = read(course / "autograded" / student / lesson / solution_path(lesson).name)
        for cell in graded.cells:
            name = cell.metadata.get("nbgrader", {}).get("grade_id")
            code = cell.source
            if code.startswith(PUT_BACK):  # deleted, then put back: the note, then its code
                code = code.split("\n", 1)[1]
            if name in source and code != source[name]:
                problems.append(f"{student}: the read-only cell {name} was not restored")
    return problems


def cell_warning(graded_notebook: Path) -> str | None:
    """The first DeprecationWarning or FutureWarning in an autograded notebook's outputs, if any."""
    text = "\n".join(
        str(output.get("text", ""))
        for cell in read(graded_notebook).cells
        for output in cell.get("outputs", [])
    )
    found = CELL_WARNING.search(text)
    return found.group(0) if found else None


def env() -> dict:
    return make_notebooks.venv_env()


def sandbox_switch() -> list[str]:
    """Nothing where autograde can use its sandbox; elsewhere the explicit unsandboxed switch."""
    from coursetools.grading.sandbox import UNSANDBOXED, sandbox_problem

    return [] if sandbox_problem() is None else [UNSANDBOXED]


def nbgrader(course: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess:
    quiet = [] if args[0] == "validate" else ["--log-level=WARN"]  # validate takes no log level
    if args[0] == "autograde":
        quiet += sandbox_switch()
    return subprocess.run(
        [sys.executable, "-m", "nbgrader", *args, *quiet],
        cwd=course,
        env=env(),
        capture_output=True,
        text=True,
        check=check,
    )


def scratch_course(tmp: Path, lessons_: list[str]) -> Path:
    """A course copy in ``tmp`` with the lessons generated (gradebook included)."""
    course = copy_course(tmp / "course")
    make_notebooks.generate(course, lessons_)
    return course


def copy_course(target: Path) -> Path:
    """make_notebooks' course copy, with a new gradebook; it grades with the installed course tools
    (coursetools), as the course does."""
    course = make_notebooks.copy_course(target)
    (course / "gradebook.db").write_bytes(empty_gradebook())
    return course


def alembic_head() -> str:
    """What nbgrader's get_alembic_version answers, read in this process: nbgrader runs `alembic
    heads` in a new Python (seconds) to stamp each new gradebook."""
    from alembic.config import Config
    from alembic.script import ScriptDirectory
    from nbgrader.dbutil import _temp_alembic_ini

    with _temp_alembic_ini("sqlite:////tmp/gradebook.db") as ini:
        (head,) = ScriptDirectory.from_config(Config(ini)).get_heads()
    return head


def new_gradebook(db: Path, course_id: str = "default_course"):
    """nbgrader's Gradebook at ``db``, stamped with alembic_head() if it is new."""
    from unittest import mock

    import nbgrader.api

    with mock.patch.object(nbgrader.api, "get_alembic_version", alembic_head):
        return nbgrader.api.Gradebook(f"sqlite:///{db}", course_id=course_id)


@functools.cache
def empty_gradebook() -> bytes:
    """A new gradebook of the course, as nbgrader makes one (its tables, alembic's version stamp,
    the course), made once per test process and copied into each scratch course."""
    course_id = re.search(r'course_id = "([^"]+)"', (ROOT / "nbgrader_config.py").read_text())
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "gradebook.db"
        new_gradebook(path, course_id.group(1)).close()
        return path.read_bytes()


def submit(course: Path, student: str, lesson: str, nb) -> Path:
    return submit_as(course, student, lesson, solution_path(lesson).name, nb)


def submit_as(course: Path, student: str, assignment: str, name: str, nb) -> Path:
    path = course / "submitted" / student / assignment / name
    path.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, path)
    return path


def scores(course: Path, lesson: str, student: str) -> dict[str, tuple[float | None, float, bool]]:
    return scores_of(course, lesson, solution_path(lesson).name, student)


def scores_of(
    course: Path, assignment: str, name: str, student: str
) -> dict[str, tuple[float | None, float, bool]]:
    """grade_id -> (score, max score, needs manual grade) from the gradebook."""
    from nbgrader.api import Gradebook

    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gb:
        notebook = gb.find_submission_notebook(Path(name).stem, assignment, student)
        return {g.name: (g.score, g.max_score, g.needs_manual_grade) for g in notebook.grades}


# ---- a small assignment graded with the course's real nbgrader_config.py (seconds, not a lesson's
# minutes) ----

SANDBOX_ASSIGNMENT, SANDBOX_NAME = "00_sandbox", "sandbox.ipynb"
# exercise -> (the right body, a visible (argument, result), a hidden (argument, result))
SANDBOX_EXERCISES = {
    "double": ("2 * x", (1, 2), (3, 6)),
    "square": ("x * x", (2, 4), (3, 9)),
    "negate": ("-x", (1, -1), (3, -3)),
}


def sandbox_source() -> nbformat.NotebookNode:
    """The small assignment's source: three one-line exercises, each with a visible and a hidden
    test."""
    cells = [new_markdown_cell("# Three small exercises")]
    for name, (body, (arg, result), (hidden, hidden_result)) in SANDBOX_EXERCISES.items():
        answer = new_code_cell(
            f"def {name}(x):\n    ### BEGIN SOLUTION\n    return {body}\n    ### END SOLUTION"
        )
        answer.metadata.nbgrader = {
            "grade": False,
            "solution": True,
            "locked": False,
            "grade_id": name,
            "schema_version": 3,
        }
        test = new_code_cell(
            f"assert {name}({arg}) == {result}\n"
            "### BEGIN HIDDEN TESTS\n"
            f"assert {name}({hidden}) == {hidden_result}\n"
            "### END HIDDEN TESTS"
        )
        test.metadata.nbgrader = {
            "grade": True,
            "solution": False,
            "locked": True,
            "points": 1,
            "grade_id": f"test_{name}",
            "schema_version": 3,
        }
        cells += [answer, test]
    nb = new_notebook(cells=cells)
    nb.metadata.kernelspec = {"name": "python3", "display_name": "Python 3", "language": "python"}
    return nb


def sandbox_course(tmp: Path, source: nbformat.NotebookNode | None = None) -> Path:
    """A scratch course in ``tmp``/course: the course's nbgrader_config.py (source/ and release/ as
    its folders) and one assignment, SANDBOX_ASSIGNMENT (``source``, by default sandbox_source()),
    generated."""
    course = tmp / "course"
    (course / "source" / SANDBOX_ASSIGNMENT).mkdir(parents=True)
    shutil.copy(ROOT / "nbgrader_config.py", course)
    # a scratch layout: source/ and release/
    with open(course / "nbgrader_config.py", "a") as config:
        config.write(
            '\nc.CourseDirectory.source_directory = "source"'
            '\nc.CourseDirectory.release_directory = "release"\n'
        )
    nbformat.write(
        source or sandbox_source(), course / "source" / SANDBOX_ASSIGNMENT / SANDBOX_NAME
    )
    (course / "gradebook.db").write_bytes(empty_gradebook())
    nbgrader(course, "generate_assignment", SANDBOX_ASSIGNMENT, "--force")
    return course
