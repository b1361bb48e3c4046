"""The reading edition's lesson pages: an executed lesson turned into the page a reader gets."""

from __future__ import annotations

import copy
import re

import nbformat

from coursetools.course import ROOT, has_hidden_tests, learner_view, markers, without_markers
from coursetools.executed import RUN_KEY

EXECUTED = [ROOT / "test-artifacts" / "executed-gpu", ROOT / "test-artifacts" / "executed"]
OUT = ROOT / "test-artifacts" / "book"
BOOK_DOCS = ROOT / "docs" / "book"

# Images from other hosts (the Colab and Binder badges): the site fetches nothing from outside,
# so they become plain links.
BADGE = re.compile(r"\[!\[([^\]]*)\]\((https?://[^)]+)\)\]\(([^)]+)\)")
REMOTE_IMAGE = re.compile(r"!\[([^\]]*)\]\((https?://[^)]+)\)")
REMOTE_IMG_TAG = re.compile(r"<img\b[^>]*\bsrc=[\"']https?://[^>]*>", re.I)
WIDGET_MIME = "application/vnd.jupyter.widget-view+json"


class BookError(RuntimeError):
    """Something the person running `make book` has to fix; the message says what."""


# ---------------------------------------------------------------- cells


def visible_tests(cell) -> str:
    """A test cell as the learner sees it: without its hidden tests, nor their markers."""
    return without_markers(learner_view(cell)).rstrip()


def strip_markers(source: str) -> str:
    """The model answer without nbgrader's `### BEGIN/END SOLUTION` lines."""
    return without_markers(source).rstrip()


def learner_stub(cell) -> str:
    """What nbgrader leaves the learner where the student notebook does not say: its stub."""
    return learner_view(cell).rstrip()


def local_images(markdown: str) -> str:
    """Markdown whose remote images (badges) are links: nothing on a page loads from elsewhere."""
    markdown = BADGE.sub(lambda m: f"[{m.group(1) or 'link'}]({m.group(3)})", markdown)
    markdown = REMOTE_IMAGE.sub(lambda m: f"[{m.group(1) or 'image'}]({m.group(2)})", markdown)
    return REMOTE_IMG_TAG.sub("", markdown)


def plain_outputs(outputs: list) -> list:
    """Outputs without widget views (tqdm's bars show as their text) or stray markers."""
    kept = []
    for out in outputs:
        out = copy.deepcopy(out)
        if "data" in out:
            out.data.pop(WIDGET_MIME, None)
            if not out.data:
                continue
            if isinstance(out.data.get("text/plain"), str):
                out.data["text/plain"] = without_markers(out.data["text/plain"])
        if out.get("output_type") == "stream":
            out.text = without_markers(out.text)
        kept.append(out)
    return kept


def _code(source: str, outputs=(), tags=(), **meta) -> nbformat.NotebookNode:
    cell = nbformat.v4.new_code_cell(source)
    cell.outputs = list(outputs)
    if tags:
        cell.metadata["tags"] = list(tags)
    cell.metadata.update(meta)
    return cell


def _md(source: str) -> nbformat.NotebookNode:
    return nbformat.v4.new_markdown_cell(source)


def learner_sources(student_nb) -> dict[str, str]:
    """The student notebook's cells by nbgrader grade_id: the learner's version of each exercise."""
    if student_nb is None:
        return {}
    found = {}
    for cell in student_nb.cells:
        grade_id = cell.metadata.get("nbgrader", {}).get("grade_id")
        if grade_id:
            found[grade_id] = cell.source
    return found


def stamp_note(run: dict | None) -> str:
    if not run:
        return (
            ":::{warning} Outputs of an unrecorded run\nThis page's outputs do not say where they "
            "were measured.\n:::"
        )
    where = f"**{run.get('device', 'an unrecorded device')}**"
    when = ", ".join(
        part
        for part in (run.get("when"), run.get("commit") and f"commit `{run['commit']}`")
        if part
    )
    if run.get("kind") == "gpu":
        body = (
            f"The outputs on this page come from a run of this lesson on {where} ({when}): "
            "the plots and numbers are that GPU's, and the *GPU check* lines are its checks."
        )
    else:
        body = (
            f"The outputs on this page come from a run of this lesson on {where} ({when}), the "
            "course's CPU test run: on a GPU the same cells measure the GPU, and the plots and "
            "numbers differ. The *GPU check* lines say what each check holds on a GPU."
        )
    return f":::{{note}} Where these outputs come from\n{body}\n:::"


def lesson_page(executed, student_nb=None) -> nbformat.NotebookNode:
    """The reading edition of one executed solution notebook."""
    learner = learner_sources(student_nb)
    page = nbformat.v4.new_notebook()
    page.metadata = {
        k: v for k, v in executed.metadata.items() if k in ("kernelspec", "language_info")
    }
    # IPython's lexer: `!command` lines highlight as shell, not as a Python syntax error
    page.metadata.setdefault("language_info", {"name": "python"})["pygments_lexer"] = "ipython3"
    run = executed.metadata.get(RUN_KEY)
    page.metadata[RUN_KEY] = run or {}
    cells = page.cells
    for index, cell in enumerate(executed.cells):
        grading = cell.metadata.get("nbgrader", {})
        tags = cell.metadata.get("tags", [])
        grade_id = grading.get("grade_id")
        if cell.cell_type == "markdown":
            if grading.get("solution"):
                mine = learner.get(grade_id) or learner_stub(cell)
                cells.append(_md(f"::::{{admonition}} Your answer\n{local_images(mine)}\n::::"))
                answer = local_images(strip_markers(cell.source))
                cells.append(_md(f"::::{{dropdown}} Show a solution\n{answer}\n::::"))
            else:
                cells.append(_md(local_images(strip_markers(cell.source))))
            if index == 0:
                cells.append(_md(stamp_note(run)))
            continue
        if cell.cell_type != "code":
            continue
        outputs = plain_outputs(cell.get("outputs", []))
        if "gpu-check" in tags:
            # the check's one-line result; its code stays in the notebook
            cells.append(_code(cell.source, outputs, tags=["remove-input", "gpu-check"]))
        elif grading.get("solution"):
            mine = learner.get(grade_id) or learner_stub(cell)
            cells.append(_code(strip_markers(mine)))
            prompts = {
                "code_prompt_show": "Show a solution",
                "code_prompt_hide": "Hide the solution",
            }
            cells.append(
                _code(strip_markers(cell.source), outputs, tags=["hide-input"], mystnb=prompts)
            )
        elif grading.get("grade") or has_hidden_tests(cell.source):
            visible = visible_tests(cell)
            if visible:
                cells.append(_code(visible, outputs))
        else:
            cells.append(_code(strip_markers(cell.source), outputs, tags=tags))
    return page


def leaks(text: str) -> list[str]:
    """Lines of a page that must never be there: nbgrader markers."""
    return markers(text)


# ---------------------------------------------------------------- the site


def lesson_title(nb, fallback: str) -> str:
    for cell in nb.cells:
        if cell.cell_type == "markdown":
            for line in cell.source.splitlines():
                if line.startswith("# "):
                    return line[2:].strip()
    return fallback
