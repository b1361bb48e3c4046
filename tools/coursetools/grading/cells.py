"""What the grader does to cells around the run: restore, comment, hide, judge.

- ``stderr_kept_visible``: a graded cell fails by raising, never by writing to stderr (autograde and
  Validate);
- ``RestoreCells``: a deleted test cell comes back where it was in the released notebook;
- ``SaveAutoGrades``: an answer that timed out or killed the kernel gets that as its comment;
- ``HideHiddenTests``: feedback without the hidden tests' code;
- ``judge_by_raising``: the learner's Validate button judges as autograde does.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from nbconvert.preprocessors import Preprocessor
from nbgrader.preprocessors import OverwriteCells
from nbgrader.preprocessors import SaveAutoGrades as _SaveAutoGrades
from traitlets import Bool

from coursetools.course import (
    HIDDEN,
    grade_id,
    has_hidden_tests,
    kind,
    marked_lines,
    nbgrader_meta,
)
from coursetools.text import strip_ansi

# The errors the grader writes into a cell: it timed out, it killed the kernel, it was not run.
TIMEOUT, DIED, NOT_RUN = "CellTimeoutError", "KernelDied", "NotRun"


def stderr_kept_visible(cell):
    """A graded cell fails by raising, never by writing to stderr: its stderr moves to stdout, in
    the feedback still.

    nbgrader fails a test cell with any stderr output (``nbgrader.utils.has_failed``), so one line a
    library logs or warns (more of them on a GPU) would zero a right answer. A cell with an error
    output keeps its outputs.
    """
    outputs = cell.get("outputs", []) if cell.get("cell_type") == "code" else []
    graded = nbgrader_meta(cell).get("grade")
    if graded and not any(o.get("output_type") == "error" for o in outputs):
        for output in outputs:
            if output.get("output_type") == "stream" and output.get("name") == "stderr":
                output.name = "stdout"
    return cell


def restore_position(released: list, cells: list, wanted: str) -> int:
    """Where the released notebook's cell ``wanted`` (a grade id) goes back into ``cells``: right
    after the nearest cell before it in ``released`` that ``cells`` still holds (the same cell id,
    grade id or source), else first."""

    # by cell id, by grade id, by source: the first that finds it wins
    def matches(before) -> list[list[int]]:
        same_id = [
            i for i, c in enumerate(cells) if before.get("id") and c.get("id") == before.get("id")
        ]
        same_grade_id = [
            i for i, c in enumerate(cells) if grade_id(before) and grade_id(c) == grade_id(before)
        ]
        same_source = [
            i
            for i, c in enumerate(cells)
            if before.source.strip()
            and c.cell_type == before.cell_type
            and c.source == before.source
        ]
        return [same_id, same_grade_id, same_source]

    at = [grade_id(cell) for cell in released].index(wanted)
    for before in reversed(released[:at]):
        found = next((found for found in matches(before) if found), None)
        if found:
            return found[-1] + 1
    return 0


PUT_BACK = "# The grader put back this read-only cell"  # the first line of a restored one


class RestoreCells(OverwriteCells):
    """nbgrader's OverwriteCells; a deleted grade cell comes back where it was in the released
    notebook, and so does a deleted read-only code cell (a referee cell the tests need).

    nbgrader puts a grade cell after the nearest nbgrader cell before it, so a test cell would land
    above an ungraded cell it needs (a %%writefile cell between the answer and its test): the right
    answer would lose its points; and it never restores a read-only cell, so a deleted referee
    would fail every test after it. OverwriteCells itself gives every locked cell (a test, a referee
    cell) its source's code back.
    """

    def _released(self, resources) -> list | None:
        from nbgrader.coursedir import CourseDirectory

        coursedir, assignment = (
            CourseDirectory(config=self.config),
            resources["nbgrader"]["assignment"],
        )
        name = f"{resources['nbgrader']['notebook']}.ipynb"
        for folder in (coursedir.release_directory, coursedir.source_directory):
            path = Path(coursedir.format_path(folder, ".", assignment)) / name
            if path.exists():
                import nbformat

                return nbformat.read(path, as_version=4).cells
        return None

    def _read_only(self, cell) -> dict:
        """A deleted read-only code cell as it was released, said restored in a first comment line
        (none before a cell magic such as %%writefile, which must come first)."""
        from nbgrader.nbgraderformat import MetadataValidator

        note = f"{PUT_BACK} ({cell.name}), deleted here.\n"
        note = "" if cell.source.startswith("%%") else note  # a cell magic must stay its first line
        meta = {"grade": False, "solution": False, "locked": True, "grade_id": cell.name}
        restored = {
            "cell_type": "code",
            "metadata": {"deletable": False, "editable": False, "nbgrader": meta},
            "source": note + cell.source,
            "execution_count": None,
            "outputs": [],
        }
        return MetadataValidator().upgrade_cell_metadata(nbformat_node(restored))

    def add_missing_grade_cells(self, nb, resources):
        released = self._released(resources)
        if released is None:
            return super().add_missing_grade_cells(nb, resources)
        source = self.gradebook.find_notebook(self.notebook_id, self.assignment_id)
        grades = {grade.name: grade for grade in source.grade_cells}
        solutions = {cell.name for cell in source.solution_cells}
        order = [grade_id(cell) for cell in released]
        place = {name: i for i, name in enumerate(order) if name}
        wanted = [
            cell
            for cell in source.source_cells
            if cell.name in grades
            or (cell.locked and cell.cell_type == "code" and cell.name not in solutions)
        ]
        for cell in sorted(wanted, key=lambda c: place.get(c.name, len(order))):
            present = {grade_id(c) for c in nb.cells}
            if cell.name in present or cell.name not in place:
                continue
            self.log.warning("Missing cell %s encountered, adding it back where it was", cell.name)
            grade = grades.get(cell.name)
            if grade is None:
                missing = self._read_only(cell)
            else:
                missing = self.missing_cell_transform(
                    cell, grade.max_score, is_solution=cell.name in solutions
                )
            missing = nbformat_node(missing)
            cell_id = released[place[cell.name]].get("id")
            if cell_id and cell_id not in {c.get("id") for c in nb.cells}:
                missing["id"] = cell_id
            nb.cells.insert(restore_position(released, nb.cells, cell.name), missing)
        # what is still missing: nbgrader's placement
        return super().add_missing_grade_cells(nb, resources)


def nbformat_node(cell):
    import nbformat

    return nbformat.from_dict(cell)


class SaveAutoGrades(_SaveAutoGrades):
    """nbgrader's SaveAutoGrades; an answer cell that timed out or killed the kernel gets that as
    its comment."""

    def _add_comment(self, cell, resources):
        super()._add_comment(cell, resources)
        why = [o.evalue for o in cell.get("outputs", []) if o.get("ename") in (TIMEOUT, DIED)]
        if why:  # in the gradebook, the Formgrader and the feedback
            comment = self.gradebook.find_comment(
                cell.metadata.nbgrader.grade_id,
                self.notebook_id,
                self.assignment_id,
                self.student_id,
            )
            comment.auto_comment = why[0]
            self.gradebook.db.commit()


class HideHiddenTests(Preprocessor):
    """Feedback without the hidden tests' code: in each test cell the hidden region becomes one
    comment line, and its errors keep their message and the student's own frames but lose every line
    of hidden code.

    nbgrader's feedback is the autograded notebook as it is, hidden tests included (its source and
    the code lines of the traceback). ``c.HideHiddenTests.enabled = False`` (nbgrader_config.py)
    shows them again.
    """

    enabled = Bool(
        True, help="False: the feedback shows the hidden tests' code, as nbgrader's own does."
    ).tag(config=True)
    note = "### hidden tests: not shown in the feedback"

    def preprocess_cell(self, cell, resources, index):
        test = cell.cell_type == "code" and kind(cell) == "test"
        if not test or not has_hidden_tests(cell.source):
            return cell, resources
        shown, hidden = [], set()
        for line in marked_lines(cell.source):
            if line.region == HIDDEN:  # a marker, or a line of hidden code
                shown += [self.note] if line.marker == "begin" else []
                hidden.add(line.text.strip())
            else:
                shown.append(line.text)
        cell.source = "\n".join(shown)
        hidden.discard("")
        for output in cell.get("outputs", []):
            if output.get("output_type") == "error":
                output.traceback = [
                    self._without(entry, hidden) for entry in output.get("traceback", [])
                ]
        return cell, resources

    @staticmethod
    def _without(entry: str, hidden: set[str]) -> str:
        """A traceback entry without its lines of hidden code (`----> 5 assert ...` says the failure
        is hidden)."""
        kept = []
        for line in entry.split("\n"):
            plain = strip_ansi(line)
            numbered = re.match(r"\s*(-*>)?\s*(\d+)\s(.*)", plain)
            code = (numbered.group(3) if numbered else plain).strip()
            if code and code in hidden:
                if numbered and numbered.group(1):
                    kept.append(
                        f"{numbered.group(1)} {numbered.group(2)} "
                        "(a hidden test: its code is not shown)"
                    )
                continue
            kept.append(line)
        return "\n".join(kept)


def judge_by_raising() -> None:
    """The learner's Validate button (`nbgrader validate`) judges a graded cell as autograde does,
    by raising only.

    Its preprocessor list is not configurable, so the two judging functions it calls
    (nbgrader.utils) are wrapped to see the cell as stderr_kept_visible leaves it (a copy: what the
    learner is shown keeps its stderr).
    """
    import nbformat
    import nbgrader.utils

    for name in ("determine_grade", "has_failed"):
        judge = getattr(nbgrader.utils, name)
        if hasattr(judge, "judges_by_raising"):
            continue

        def by_raising(cell, *args, _judge=judge, **kwargs):
            copy = nbformat.from_dict(json.loads(json.dumps(cell)))
            return _judge(stderr_kept_visible(copy), *args, **kwargs)

        by_raising.judges_by_raising = True
        setattr(nbgrader.utils, name, by_raising)
