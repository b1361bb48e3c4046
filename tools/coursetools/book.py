"""The reading edition: the course as a static site with every lesson's outputs (`make book`).

The lesson pages are the lessons as `make test` ran them: tests/lessons/test_nbval.py runs each
solution under nbval with the plugin `coursetools.executed`, which keeps the executed notebook in
test-artifacts/executed/NN_topic.ipynb (a GPU run's copies, where the GPU runner keeps them in
test-artifacts/executed-gpu/, come first). Nothing is executed here. Each page shows:

- the lesson as a learner gets it, with the outputs of that run, and a note saying on which
  device, when and at which commit they were measured;
- each exercise as the learner's version (the student notebook's cell), with the model answer and
  its outputs folded below it ("Show a solution");
- the visible tests without the hidden ones; no `### BEGIN`/`### END` marker anywhere;
- each GPU-check cell as its one-line result, without its code.

The site is Sphinx with MyST-NB and the Sphinx Book Theme (docs/book/conf.py says why not Jupyter
Book 2). Usage: `python -m coursetools.book [--out DIR] [--executed DIR ...] [LESSON ...]`.
"""

from __future__ import annotations

import argparse
import copy
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import nbformat

from coursetools.executed import RUN_KEY, source_digest

ROOT = Path(__file__).resolve().parents[2]
EXECUTED = [ROOT / "test-artifacts" / "executed-gpu", ROOT / "test-artifacts" / "executed"]
OUT = ROOT / "test-artifacts" / "book"
BOOK_DOCS = ROOT / "docs" / "book"

HIDDEN_TESTS = re.compile(
    r"^[ \t]*### BEGIN HIDDEN TESTS[^\n]*\n.*?^[ \t]*### END HIDDEN TESTS[^\n]*(\n|$)",
    re.M | re.S,
)
MARKER_LINE = re.compile(r"^[ \t]*### (BEGIN|END) (SOLUTION|HIDDEN TESTS)[^\n]*(\n|$)", re.M)
SOLUTION_BLOCK = re.compile(
    r"^([ \t]*)### BEGIN SOLUTION[^\n]*\n.*?^[ \t]*### END SOLUTION[^\n]*(\n|$)", re.M | re.S
)
# Images from other hosts (the Colab and Binder badges): the site fetches nothing from outside,
# so they become plain links.
BADGE = re.compile(r"\[!\[([^\]]*)\]\((https?://[^)]+)\)\]\(([^)]+)\)")
REMOTE_IMAGE = re.compile(r"!\[([^\]]*)\]\((https?://[^)]+)\)")
REMOTE_IMG_TAG = re.compile(r"<img\b[^>]*\bsrc=[\"']https?://[^>]*>", re.I)
WIDGET_MIME = "application/vnd.jupyter.widget-view+json"


class BookError(RuntimeError):
    """Something the person running `make book` has to fix; the message says what."""


def lessons(root: Path = ROOT) -> list[str]:
    return sorted(p.parent.name for p in (root / "solutions").glob("*/*.ipynb"))


def solution_path(lesson: str, root: Path = ROOT) -> Path:
    (path,) = sorted((root / "solutions" / lesson).glob("*.ipynb"))
    return path


# ---------------------------------------------------------------- cells


def strip_hidden_tests(source: str) -> str:
    """A test cell as the learner sees it: without its hidden tests, nor their markers."""
    return MARKER_LINE.sub("", HIDDEN_TESTS.sub("", source)).rstrip() + "\n"


def strip_markers(source: str) -> str:
    """The model answer without nbgrader's `### BEGIN/END SOLUTION` lines."""
    return MARKER_LINE.sub("", source).rstrip()


def learner_stub(source: str, cell_type: str) -> str:
    """What nbgrader leaves the learner where the student notebook does not say: its stubs."""
    if cell_type == "markdown":
        return (
            SOLUTION_BLOCK.sub("YOUR ANSWER HERE\n", source).rstrip()
            if "###" in source
            else ("YOUR ANSWER HERE")
        )

    def stub(match: re.Match) -> str:
        indent = match.group(1)
        return f"{indent}# YOUR CODE HERE\n{indent}raise NotImplementedError()\n"

    return SOLUTION_BLOCK.sub(stub, source).rstrip()


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
                out.data["text/plain"] = MARKER_LINE.sub("", out.data["text/plain"])
        if out.get("output_type") == "stream":
            out.text = MARKER_LINE.sub("", out.text)
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
                mine = learner.get(grade_id) or learner_stub(cell.source, "markdown")
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
            mine = learner.get(grade_id) or learner_stub(cell.source, "code")
            cells.append(_code(strip_markers(mine)))
            prompts = {
                "code_prompt_show": "Show a solution",
                "code_prompt_hide": "Hide the solution",
            }
            cells.append(
                _code(strip_markers(cell.source), outputs, tags=["hide-input"], mystnb=prompts)
            )
        elif grading.get("grade") or "### BEGIN HIDDEN TESTS" in cell.source:
            visible = strip_hidden_tests(cell.source).rstrip()
            if visible:
                cells.append(_code(visible, outputs))
        else:
            cells.append(_code(strip_markers(cell.source), outputs, tags=tags))
    return page


def leaks(text: str) -> list[str]:
    """Lines of a page that must never be there: nbgrader markers."""
    return [line.strip() for line in text.splitlines() if re.search(r"### (BEGIN|END) ", line)]


# ---------------------------------------------------------------- the site


def lesson_title(nb, fallback: str) -> str:
    for cell in nb.cells:
        if cell.cell_type == "markdown":
            for line in cell.source.splitlines():
                if line.startswith("# "):
                    return line[2:].strip()
    return fallback


def find_executed(lesson: str, dirs: list[Path]) -> Path | None:
    for folder in dirs:
        path = folder / f"{lesson}.ipynb"
        if path.exists():
            return path
    return None


def claims_page(root: Path, titles: dict[str, str]) -> str:
    """Every claim the lessons make (their `claims.claim(` calls), by lesson."""
    lines = [
        "# The claims catalogue",
        "",
        "Each statement a lesson makes about what a GPU does is a *claim*: on a GPU the lesson "
        "measures it and checks it against a sourced bound (`gpucourse.claims.claim`); on a CPU "
        "the same cell prints what it would check. The GPU runner (`make test-gpu`) reports each "
        "one with its measured value. These are the claims, lesson by lesson.",
        "",
    ]
    try:
        from coursetools.gpurun.catalogue import lesson_claims
    except ImportError as error:  # the runner's catalogue moved: say so on the page
        return "\n".join([*lines, f"(The catalogue could not be read: {error}.)", ""])
    for lesson, title in titles.items():
        found = lesson_claims(solution_path(lesson, root))
        lines += [f"## [{lesson[:2]} {title}](lessons/{lesson}.ipynb)", ""]
        if not found:
            lines += ["This lesson makes no GPU claim.", ""]
            continue
        lines += ["| claim | part |", "|---|---|"]
        for claim in found:
            text = claim["text"].replace("|", "\\|").replace("\n", " ")
            lines.append(f"| {text} | {claim.get('part') or ''} |")
        lines.append("")
    return "\n".join(lines)


def repository_url(root: Path = ROOT) -> str:
    import tomllib

    project = tomllib.loads((root / "pyproject.toml").read_text())["project"]
    return project.get("urls", {}).get("Repository", "https://github.com/gpus-for-ml/gpus-for-ml")


def home_page(titles: dict[str, str], runs: dict[str, dict], extra: list[str]) -> str:
    template = (BOOK_DOCS / "index.md").read_text()
    rows = []
    for lesson, title in titles.items():
        run = runs.get(lesson) or {}
        where = f" (outputs from {run['device']})" if run.get("device") else ""
        rows.append(f"- [{title}](lessons/{lesson}.ipynb){where}")
    toc = ["```{toctree}", ":hidden:", ":caption: Lessons", ""]
    toc += [f"lessons/{lesson}" for lesson in titles]
    toc += ["```", ""]
    if extra:
        toc += ["```{toctree}", ":hidden:", ":caption: Reference", "", *extra, "```", ""]
    return (
        template.replace("{{repository}}", f"[the course's repository]({repository_url()})")
        .replace("{{lessons}}", "\n".join(rows))
        .replace("{{toctree}}", "\n".join(toc))
    )


def stage(root: Path, src: Path, chosen: list[str], dirs: list[Path], strict: bool) -> dict:
    """Write the site's sources into src: conf.py, the home page, the lesson pages, the claims
    catalogue and the GPU reports. Returns {lesson: its run stamp}."""
    if src.exists():
        shutil.rmtree(src)
    (src / "lessons").mkdir(parents=True)
    shutil.copy(BOOK_DOCS / "conf.py", src / "conf.py")
    shutil.copytree(BOOK_DOCS / "_static", src / "_static")
    titles, runs, missing, stale = {}, {}, [], []
    for lesson in chosen:
        path = find_executed(lesson, dirs)
        if path is None:
            missing.append(lesson)
            continue
        executed = nbformat.read(path, as_version=4)
        source = nbformat.read(solution_path(lesson, root), as_version=4)
        run = executed.metadata.get(RUN_KEY) or {}
        if run.get("source_digest") and run["source_digest"] != source_digest(source):
            stale.append(f"{lesson} ({path})")
        student = root / "notebooks" / lesson / solution_path(lesson, root).name
        student_nb = nbformat.read(student, as_version=4) if student.exists() else None
        page = lesson_page(executed, student_nb)
        nbformat.write(page, src / "lessons" / f"{lesson}.ipynb")
        titles[lesson] = lesson_title(page, lesson)
        runs[lesson] = run
    folders = ", ".join(str(d) for d in dirs)
    if missing:
        raise BookError(
            f"no executed notebook for {', '.join(missing)} in {folders}: `make test` keeps them "
            "(or run one lesson: .venv/bin/python -m pytest --nbval-lax -p coursetools.executed "
            "--save-executed test-artifacts/executed solutions/NN_topic/topic.ipynb)"
        )
    if stale:
        message = (
            f"executed before its solution last changed: {', '.join(stale)}; run `make test` "
            "again for current outputs"
        )
        if strict:
            raise BookError(message)
        print(f"book: warning: {message}", file=sys.stderr)
    extra = ["claims"]
    (src / "claims.md").write_text(claims_page(root, titles))
    reports = sorted((root / "docs" / "gpu-reports").glob("*.md"))
    if reports:
        (src / "gpu-reports").mkdir()
        for report in reports:
            name = "index" if report.name == "README.md" else report.stem
            shutil.copy(report, src / "gpu-reports" / f"{name}.md")
        extra.append("gpu-reports/index" if (src / "gpu-reports/index.md").exists() else "")
        extra += [f"gpu-reports/{r.stem}" for r in reports if r.name != "README.md"]
        extra = [e for e in extra if e]
    (src / "index.md").write_text(home_page(titles, runs, extra))
    return runs


def build(
    root: Path = ROOT,
    out: Path = OUT,
    chosen: list[str] | None = None,
    dirs: list[Path] | None = None,
    strict: bool = False,
) -> Path:
    """Build the site into out/html; returns that folder."""
    chosen = chosen or lessons(root)
    dirs = dirs or EXECUTED
    src, html = out / "src", out / "html"
    stage(root, src, chosen, dirs, strict)
    if html.exists():
        shutil.rmtree(html)
    command = [sys.executable, "-m", "sphinx", "-b", "html", "-q", "-j", "auto"]
    command += ["-d", str(out / "doctrees"), str(src), str(html)]
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode != 0:
        raise BookError(f"Sphinx failed ({' '.join(command)}):\n{done.stderr[-4000:]}")
    found = {
        str(page.relative_to(html)): leaks(page.read_text(errors="replace"))
        for page in html.rglob("*.html")
    }
    found = {page: lines for page, lines in found.items() if lines}
    if found:
        raise BookError(f"nbgrader markers on the site: {found}")
    (html / ".nojekyll").touch()  # GitHub Pages: serve _static/ as it is
    return html


def missing_packages() -> list[str]:
    import importlib.util

    wanted = {"sphinx": "sphinx", "myst_nb": "myst-nb", "sphinx_book_theme": "sphinx-book-theme"}
    wanted["sphinx_design"] = "sphinx-design"
    return [name for module, name in wanted.items() if importlib.util.find_spec(module) is None]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m coursetools.book", description=__doc__.split("\n")[0]
    )
    parser.add_argument("lessons", nargs="*", help="lesson folders to include (default: all)")
    parser.add_argument("--out", type=Path, default=OUT, help=f"default: {OUT.relative_to(ROOT)}")
    parser.add_argument(
        "--executed",
        type=Path,
        action="append",
        help="a folder of executed notebooks, NN_topic.ipynb (repeatable, first wins; default: "
        + ", ".join(str(d.relative_to(ROOT)) for d in EXECUTED)
        + ")",
    )
    parser.add_argument(
        "--strict", action="store_true", help="fail when a lesson changed after its run"
    )
    args = parser.parse_args(argv)
    unknown = sorted(set(args.lessons) - set(lessons()))
    if unknown:
        parser.error(f"no such lesson: {', '.join(unknown)} (lessons: {', '.join(lessons())})")
    if missing := missing_packages():
        print(
            f"book: {', '.join(missing)} not installed here: the site is built with Sphinx, "
            "MyST-NB, the Sphinx Book Theme and sphinx-design (the course extra in pyproject.toml; "
            "`make` installs it)",
            file=sys.stderr,
        )
        return 1
    start = time.monotonic()
    try:
        html = build(ROOT, args.out, args.lessons or None, args.executed, args.strict)
    except BookError as error:
        print(f"book: {error}", file=sys.stderr)
        return 1
    print(
        f"book: the site is in {html} ({time.monotonic() - start:.0f} s): "
        f"open {html / 'index.html'}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
