"""The one model of the course: where it lives, its lessons, and what their cells are.

- ``ROOT``, ``lessons()``, ``solution_path(lesson)``, ``student_path(lesson)``: the checkout, the
  lesson folders (found from solutions/), a lesson's source and its generated student notebook;
- the cells' kinds, from nbgrader's metadata (``kind``: "answer", "test", "written", "read-only")
  and the tags the course gives them (``DEMO``, ``GPU_CHECK``: the grader skips them; ``CHECKED``:
  nbval compares their outputs);
- nbgrader's markers (``### BEGIN SOLUTION``, ``### BEGIN HIDDEN TESTS``, and their ends):
  ``marked_lines`` reads them as nbgrader does, and ``learner_view`` is a cell as the student
  notebook has it, made by nbgrader's own ClearSolutions and ClearHiddenTests.

Standard library only at import: the GPU runner imports it before it installs anything.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import NamedTuple

ROOT = Path(__file__).resolve().parents[2]

# ---------------------------------------------------------------- lessons


def lessons(root: Path = ROOT) -> list[str]:
    """Lesson folders, found from solutions/: a new lesson needs no code change."""
    return sorted({p.parent.name for p in (root / "solutions").glob("*/*.ipynb")})


def solution_path(lesson: str, root: Path = ROOT) -> Path:
    """The lesson's source, solutions/NN_topic/topic.ipynb (one notebook a lesson)."""
    (path,) = sorted((root / "solutions" / lesson).glob("*.ipynb"))
    return path


def student_path(lesson: str, root: Path = ROOT) -> Path:
    """The student notebook nbgrader generates from it, notebooks/NN_topic/topic.ipynb."""
    return root / "notebooks" / lesson / solution_path(lesson, root).name


# ---------------------------------------------------------------- cells


def code_cells(path: Path) -> list[str]:
    """The sources of a notebook's code cells, in nbval's order ("Cell N" is the N-th code cell),
    read as JSON (no nbformat: the GPU runner reads them before it installs anything)."""
    cells = json.loads(Path(path).read_text(encoding="utf-8")).get("cells", [])
    return ["".join(c.get("source", "")) for c in cells if c.get("cell_type") == "code"]


# Code cells tagged so are not run by the grader (their outputs are cleared); nbval and a learner's
# Run All run them. "demo": a demo-only cell; "gpu-check": a short cell holding a claim about a
# measurement (never graded).
DEMO, GPU_CHECK = "demo", "gpu-check"
SKIPPED_TAGS = (DEMO, GPU_CHECK)
CHECKED = "nbval-check-output"  # a cell whose outputs nbval compares (and solutions/ keeps)

KINDS = ("answer", "test", "written", "read-only")


def nbgrader_meta(cell) -> dict:
    return cell.get("metadata", {}).get("nbgrader", {})


def grade_id(cell) -> str | None:
    return nbgrader_meta(cell).get("grade_id")


def tags(cell) -> list[str]:
    return cell.get("metadata", {}).get("tags", [])


def kind(cell) -> str | None:
    """What nbgrader makes of a cell: "answer" (an autograded answer, code), "test" (autograder
    tests), "written" (an answer graded by hand), "read-only" (locked, neither answer nor test: a
    referee's code or the lesson's text); None for a plain cell."""
    meta = nbgrader_meta(cell)
    if meta.get("solution"):
        if meta.get("grade"):
            return "written"
        return "answer" if cell.get("cell_type") == "code" else None
    if meta.get("grade"):
        return "test"
    return "read-only" if meta.get("locked") else None


def cells_of(nb, wanted: str) -> list:
    """The cells of one ``kind`` (KINDS), in notebook order."""
    if wanted not in KINDS:
        raise ValueError(f"no cell kind {wanted!r}; the kinds: {', '.join(KINDS)}")
    return [cell for cell in nb.cells if kind(cell) == wanted]


def answer_of(test_id: str, answer_ids: list[str]) -> str | None:
    """The answer cell a test cell grades: test ids are `test_<answer id>` (optionally `_more`)."""
    matches = [a for a in answer_ids if test_id == f"test_{a}" or test_id.startswith(f"test_{a}_")]
    return max(matches, key=len) if matches else None


def skipped_by_grader(cell) -> bool:
    """A code cell the grader does not run: tagged ``demo`` or ``gpu-check`` and no nbgrader cell.

    nbgrader's cells (answers, tests, locked cells) always run, whatever their tags: a learner who
    tags a test cell ``demo`` does not skip its test.
    """
    meta = nbgrader_meta(cell)
    nbgrader_cell = meta.get("grade") or meta.get("solution") or meta.get("locked")
    return (
        cell.get("cell_type") == "code"
        and not nbgrader_cell
        and any(t in SKIPPED_TAGS for t in tags(cell))
    )


# ---------------------------------------------------------------- nbgrader's markers

# nbgrader's delimiters (ClearSolutions' and ClearHiddenTests' defaults, which nbgrader_config.py
# leaves as they are): a line that holds one is a marker line, whatever else it holds.
SOLUTION, HIDDEN = "solution", "hidden tests"
DELIMITERS = {
    SOLUTION: ("BEGIN SOLUTION", "END SOLUTION"),
    HIDDEN: ("BEGIN HIDDEN TESTS", "END HIDDEN TESTS"),
}


class Line(NamedTuple):
    text: str
    region: str | None  # SOLUTION, HIDDEN, or None outside both (a marker: the region it bounds)
    marker: str | None  # "begin", "end", or None for a line of code or text


def marked_lines(source: str) -> list[Line]:
    """Each line of ``source`` (split on "\\n", as nbgrader splits it) with its region and whether
    it is a marker, read as nbgrader's preprocessors read them."""
    found, inside = [], None
    for text in source.split("\n"):
        for region, (begin, end) in DELIMITERS.items():
            if begin in text:
                found.append(Line(text, region, "begin"))
                inside = region
                break
            if end in text:
                found.append(Line(text, region, "end"))
                inside = None
                break
        else:
            found.append(Line(text, inside, None))
    return found


def markers(source: str) -> list[str]:
    """The marker lines of ``source``, stripped (none in a student notebook, nor in the book)."""
    return [line.text.strip() for line in marked_lines(source) if line.marker]


def without_markers(source: str) -> str:
    """``source`` without its marker lines: the model answer as it reads, hidden tests kept."""
    return "\n".join(line.text for line in marked_lines(source) if not line.marker)


def hidden_lines(source: str) -> list[str]:
    """The lines inside the hidden tests' regions (their markers left out)."""
    return [line.text for line in marked_lines(source) if line.region == HIDDEN and not line.marker]


def has_hidden_tests(source: str) -> bool:
    return any(line.region == HIDDEN and line.marker == "begin" for line in marked_lines(source))


def learner_view(cell, language: str = "python") -> str:
    """The cell's source as the student notebook has it: nbgrader's ClearSolutions (an answer
    region becomes the stub, "# YOUR CODE HERE" and "raise NotImplementedError()", or "YOUR ANSWER
    HERE") and ClearHiddenTests (hidden tests gone), run on a copy of the cell."""
    import nbformat
    from nbgrader.preprocessors import ClearHiddenTests, ClearSolutions

    nb = nbformat.v4.new_notebook(cells=[nbformat.from_dict(copy.deepcopy(dict(cell)))])
    nb.metadata["kernelspec"] = {
        "name": "python3",
        "display_name": "Python 3",
        "language": language,
    }
    resources: dict = {}
    for step in (ClearSolutions(enforce_metadata=False), ClearHiddenTests(enforce_metadata=False)):
        nb, resources = step.preprocess(nb, resources)
    return nb.cells[0].source
