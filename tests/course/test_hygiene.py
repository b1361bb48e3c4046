"""Every lesson has the course's shape; student notebooks ship clean; the README tells the truth."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import coursekit as ck
import nbformat
import pytest
from coursetools.course import (
    DELIMITERS,
    DEMO,
    GPU_CHECK,
    has_hidden_tests,
    kind,
    learner_view,
    markers,
    tags,
)

LESSONS = ck.lessons()
README = (ck.ROOT / "README.md").read_text()


def badge_urls(lesson: str) -> tuple[str, str]:
    repo = ck.repository_url().removeprefix("https://github.com/")
    path = f"notebooks/{lesson}/{ck.solution_path(lesson).name}"
    return (
        f"https://colab.research.google.com/github/{repo}/blob/main/{path}",
        f"https://mybinder.org/v2/gh/{repo}/main?urlpath=lab/tree/{path}",
    )


def test_lesson_folders_are_numbered_topics():
    for lesson in LESSONS:
        assert re.fullmatch(r"\d\d_[a-z0-9_]+", lesson), lesson
        assert ck.solution_path(lesson).stem == lesson[3:], (
            "the notebook is named after its topic, without the number"
        )


@pytest.mark.parametrize("lesson", LESSONS)
@pytest.mark.parametrize("kind", ["solutions", "notebooks"])
def test_notebook_is_valid_with_the_python3_kernel(lesson, kind):
    path = ck.solution_path(lesson) if kind == "solutions" else ck.student_path(lesson)
    nb = ck.read(path)
    nbformat.validate(nb)
    assert nb.nbformat == 4 and nb.nbformat_minor >= 5 and all(cell.get("id") for cell in nb.cells)
    assert nb.metadata.kernelspec.name == "python3"


@pytest.mark.parametrize("lesson", LESSONS)
def test_student_notebook_is_clean(lesson):
    nb = ck.read(ck.student_path(lesson))
    for cell in nb.cells:
        if cell.cell_type == "code":
            assert not cell.outputs and cell.execution_count is None, (
                f"{lesson}: student notebooks carry no outputs"
            )
        assert not markers(cell.source), f"{lesson}: nbgrader's markers in a student notebook"


@pytest.mark.parametrize("lesson", LESSONS)
def test_solution_keeps_only_checked_outputs(lesson):
    for cell in ck.read(ck.solution_path(lesson)).cells:
        if cell.cell_type == "code" and ck.CHECKED not in tags(cell):
            assert not cell.outputs, (
                f"{lesson}: only cells tagged {ck.CHECKED} keep outputs in solutions/"
            )


@pytest.mark.parametrize("lesson", LESSONS)
def test_lesson_opens_like_every_lesson(lesson):
    nb = ck.read(ck.solution_path(lesson))
    intro = nb.cells[0].source
    assert nb.cells[0].cell_type == "markdown" and intro.startswith("# ")
    title = intro.splitlines()[0]
    assert not re.match(r"#\s*(Lesson\s*)?\d", title), (
        "the lesson number lives only in the folder name"
    )
    for needle in ("**What you will learn**", "**Prerequisites**", "**Time**", *badge_urls(lesson)):
        assert needle in intro, f"{lesson}: the first cell needs {needle}"
    assert any(c.cell_type == "markdown" and c.source.startswith("## Recap") for c in nb.cells), (
        "end with a recap"
    )


@pytest.mark.parametrize("lesson", LESSONS)
def test_setup_cell_is_the_course_one(lesson):
    nb = ck.read(ck.solution_path(lesson))
    setup = next(c for c in nb.cells if c.cell_type == "code")
    assert f'COURSE_REPO = "{ck.repository_url()}"' in setup.source, (
        "the Colab install names the repository"
    )
    for needle in (
        '"google.colab" in sys.modules',
        "gpucourse.setup_notebook(",
        "device = gpucourse.choose_device()",
    ):
        assert needle in setup.source


@pytest.mark.parametrize("lesson", LESSONS)
def test_exercises_follow_the_conventions(lesson):
    nb = ck.read(ck.solution_path(lesson))
    answers = [c.metadata.nbgrader.grade_id for c in ck.nbgrader_cells(nb, "answer")]
    tests = ck.nbgrader_cells(nb, "test")
    written = ck.nbgrader_cells(nb, "written")
    assert 3 <= len(answers) + len(written) <= 6, "3 to 6 exercises"
    assert written, "at least one written answer, graded by hand"
    graded = {ck.answer_of(t.metadata.nbgrader.grade_id, answers) for t in tests}
    assert None not in graded, "test cells are named test_<answer id>"
    assert graded == set(answers), "every answer cell has a test cell"
    for cell in tests + written:
        assert cell.metadata.nbgrader.get("points", 0) > 0
    for cell in tests:
        assert has_hidden_tests(cell.source), (
            f"{cell.metadata.nbgrader.grade_id} needs hidden tests"
        )
        assert "assert" in learner_view(cell), "learners get visible tests too"


def test_the_course_reads_nbgraders_markers_as_nbgrader_does():
    from nbgrader.preprocessors import ClearHiddenTests, ClearSolutions

    solution, hidden = ClearSolutions(), ClearHiddenTests()
    ours = [solution.begin_solution_delimeter, solution.end_solution_delimeter]
    ours += [hidden.begin_test_delimeter, hidden.end_test_delimeter]
    assert ours == [d for pair in DELIMITERS.values() for d in pair]


LINE_LIMIT, MEDIAN_LINES, PARAGRAPH_WORDS = 100, 6, 130


def _teaching_cells(nb) -> list:
    """The code cells a reader reads: all but the test cells and the collapsed GPU checks."""
    tests = {id(c) for c in ck.nbgrader_cells(nb, "test")}
    return [
        c
        for c in nb.cells
        if c.cell_type == "code" and id(c) not in tests and GPU_CHECK not in tags(c)
    ]


@pytest.mark.parametrize("lesson", LESSONS)
def test_cells_are_short(lesson):
    cells = _teaching_cells(ck.read(ck.solution_path(lesson)))  # what a reader of the course sees
    lengths = sorted(len(c.source.splitlines()) for c in cells)
    median = lengths[len(lengths) // 2]
    assert median <= MEDIAN_LINES, (
        f"{lesson}: a median of at most six lines a code cell, not {median}"
    )
    # A long cell needs a reason. The course accepts two: a script written to a file, and a referee
    # cell (read-only: autograde restores it whole, so it cannot be split across cells). An answer
    # cell counts as learners see it, without the model answer.
    long = [
        c.source.splitlines()[0]
        for c in cells
        if len(learner_view(c).splitlines()) > 25
        and not c.source.startswith("%%writefile")
        and kind(c) != "read-only"
    ]
    assert not long, (
        f"cells over 25 lines (split them, or write the script with %%writefile): {long}"
    )


@pytest.mark.parametrize("lesson", LESSONS)
def test_student_code_fits_the_page(lesson):
    """JupyterLab and Colab show about 100 columns of code without scrolling sideways."""
    long = [
        f"cell {i}: {line[:60]}... ({len(line)} characters)"
        for i, cell in enumerate(ck.read(ck.student_path(lesson)).cells)
        if cell.cell_type == "code"
        for line in cell.source.splitlines()
        if len(line) > LINE_LIMIT
    ]
    assert not long, f"{lesson}: code lines over {LINE_LIMIT} characters:\n" + "\n".join(long)


@pytest.mark.parametrize("lesson", LESSONS)
def test_plumbing_stays_out_of_the_lesson_code(lesson):
    """Demos carry the `demo` tag instead of an `if not grading:` in the code; a GPU claim lives
    in its own `gpu-check` cell; neither appears in a cell a learner reads as the lesson."""
    found = []
    for i, cell in enumerate(ck.read(ck.student_path(lesson)).cells):
        if cell.cell_type != "code":
            continue
        tagged = set(tags(cell))
        if "is_grading" in cell.source and not {DEMO, GPU_CHECK} & tagged:
            found.append(f"cell {i}: is_grading() in a cell without the {DEMO!r} tag")
        if re.search(r"\b(claim|needs)\(", cell.source) and GPU_CHECK not in tagged:
            found.append(f"cell {i}: a GPU claim outside a {GPU_CHECK!r} cell")
    assert not found, f"{lesson}:\n" + "\n".join(found)


@pytest.mark.parametrize("lesson", LESSONS)
def test_gpu_checks_are_collapsed_in_jupyterlab_and_colab(lesson):
    checks = [c for c in ck.read(ck.student_path(lesson)).cells if GPU_CHECK in tags(c)]
    for cell in checks:
        first = cell.source.splitlines()[0] if cell.source else ""
        where = f"{lesson}: the GPU check {first!r}"
        assert cell.cell_type == "code", where
        assert cell.metadata.get("jupyter", {}).get("source_hidden") is True, (
            f"{where}: collapse it"
        )
        assert cell.metadata.get("cellView") == "form", f"{where}: Colab's form view hides it"
        assert re.fullmatch(r"# ?@title GPU check: \S.{8,}", first), f"{where}: a #@title line"
        assert re.search(r"\b(claim|needs)\(", cell.source), f"{where}: holds no claim"
        assert len(cell.source.splitlines()) <= 20, f"{where}: a check stays short"


@pytest.mark.parametrize("lesson", LESSONS)
def test_solution_code_is_formatted_by_ruff(lesson):
    """ruff formats notebooks (pyproject's 100 columns); `make lint` runs the same check."""
    ruff = shutil.which("ruff", path=str(Path(sys.executable).parent)) or shutil.which("ruff")
    if ruff is None:
        pytest.skip("ruff is not installed here: `pip install -e '.[course]'`")
    path = ck.solution_path(lesson)
    result = subprocess.run(
        [ruff, "format", "--check", "--diff", str(path)],
        cwd=ck.ROOT,
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, (
        f"`ruff format {path.relative_to(ck.ROOT)}`:\n{result.stdout[-3000:]}"
    )


def paragraphs(markdown: str) -> list[str]:
    """What a reader takes in as one piece: a paragraph, a list item or a table row; no code."""
    markdown = re.sub(r"```.*?```", "", markdown, flags=re.S)
    markdown = re.sub(r"\]\([^)]*\)", "]", markdown)  # a link's address is not read
    units = []
    for block in re.split(r"\n\s*\n", markdown):
        for unit in re.split(r"\n(?=\s*(?:[-*+] |\d+\. |\|))", block):
            if unit.strip():
                units.append(unit)
    return units


def test_paragraphs_are_counted_as_a_reader_reads_them():
    text = (
        "One two three.\n\n- a b\n- c d e\n\n| x | y |\n|---|---|\n\n```\ncode\n```\n[w](h/t/t/p)"
    )
    assert [len(p.split()) for p in paragraphs(text)] == [3, 3, 4, 5, 1, 1]


@pytest.mark.parametrize("lesson", LESSONS)
def test_paragraphs_hold_one_idea(lesson):
    """No paragraph over about 120 words (the test allows 130): one idea a paragraph."""
    long = [
        f"cell {i}: {unit.split()[:8]}... ({len(unit.split())} words)"
        for i, cell in enumerate(ck.read(ck.solution_path(lesson)).cells)
        if cell.cell_type == "markdown"
        for unit in paragraphs(cell.source)
        if len(unit.split()) > PARAGRAPH_WORDS
    ]
    assert not long, f"{lesson}: paragraphs over {PARAGRAPH_WORDS} words:\n" + "\n".join(long)


@pytest.mark.parametrize("lesson", LESSONS)
def test_no_deprecated_api(lesson):
    code = "\n".join(
        c.source for c in ck.read(ck.solution_path(lesson)).cells if c.cell_type == "code"
    )
    for old in ("torch.cuda.amp.", "tensorflow-gpu", "tf.compat.v1", "torch.cuda.OutOfMemoryError"):
        assert old not in code, f"{lesson} uses {old}: use the current API"


def test_readme_table_lists_every_lesson():
    rows = [line for line in README.splitlines() if re.match(r"\|\s*\d\d\s*\|", line)]
    assert [re.match(r"\|\s*(\d\d)", row).group(1) for row in rows] == [
        lesson[:2] for lesson in LESSONS
    ]
    for lesson, row in zip(LESSONS, rows, strict=True):
        title = ck.read(ck.solution_path(lesson)).cells[0].source.splitlines()[0].removeprefix("# ")
        assert f"[{title}](notebooks/{lesson}/{ck.solution_path(lesson).name})" in row
        assert f"(solutions/{lesson}/{ck.solution_path(lesson).name})" in row, (
            "link the solution too"
        )
        colab, binder = badge_urls(lesson)
        assert colab in row and binder in row


# A tracker number (the word "issue" and a number, or a hash and a number) or a reference to expert
# reads of the course is project-internal: a learner or a user cannot follow it.
INTERNAL = re.compile(
    r"\bissues?\s*#?\s*\d+|(?<![\w/&])#\d+(?![\w;])|\breview(s|ed|er|ers)?\b", re.I
)


def test_no_text_mentions_issue_numbers_or_reviews():
    root = ck.ROOT
    texts = [
        *root.glob("solutions/*/*.ipynb"),
        *root.glob("notebooks/*/*.ipynb"),
        root / "README.md",
        root / "CONTRIBUTING.md",
        *root.glob("utils/gpucourse/*.py"),
        *root.glob("tools/**/*.py"),
        *root.glob("docs/*.md"),
        *root.glob("tests/**/*.py"),
    ]
    texts.remove(Path(__file__))  # the pattern above
    found = []
    for path in texts:
        text = path.read_text()
        if path.suffix == ".ipynb":
            text = "\n".join(cell.source for cell in nbformat.reads(text, as_version=4).cells)
        found += [
            f"{path.relative_to(root)}: ...{text[max(0, m.start() - 40) : m.end() + 20]!r}"
            for m in INTERNAL.finditer(text)
        ]
    assert not found, "internal references in text learners and users read:\n" + "\n".join(found)


# A repository path as docs and comments name it: under a top folder, `NN_topic`, `topic` or `<...>`
# standing for any name.
REPO_PATH = re.compile(
    r"(?<![\w./<-])((?:utils|tools|tests|docs|solutions|notebooks|binder|colab|\.ci)/[\w.*<>/-]*[\w*>])"
)


def _prose(path: Path):
    """(line, text) of what a reader reads as prose: a markdown file's lines outside code blocks, a
    Python file's comments and docstrings, a Makefile's comments."""
    import ast
    import io
    import tokenize

    text = path.read_text()
    if path.suffix == ".md":
        fenced = False
        for number, line in enumerate(text.splitlines(), 1):
            fenced ^= line.lstrip().startswith("```")
            if not fenced and not line.startswith("    "):
                yield number, line
    elif path.suffix == ".py":
        for token in tokenize.generate_tokens(io.StringIO(text).readline):
            if token.type == tokenize.COMMENT:
                yield token.start[0], token.string
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
                if doc := ast.get_docstring(node, clean=False):
                    yield getattr(node, "lineno", 1), doc
    else:
        yield from ((n, line) for n, line in enumerate(text.splitlines(), 1) if "#" in line)


def test_every_path_the_docs_and_comments_name_exists():
    """A file moved or deleted takes its mentions with it: README, CONTRIBUTING, docs/, the
    Makefile, pyproject.toml, the workflows, and the comments and docstrings of the helper, the
    tools and the tests."""
    root = ck.ROOT
    texts = [
        root / "README.md",
        root / "CONTRIBUTING.md",
        root / "Makefile",
        *root.glob("docs/**/*.md"),
        root / "pyproject.toml",
        root / "nbgrader_config.py",
        *root.glob("docs/*.toml"),
        *root.glob(".github/workflows/*.yml"),
        *root.glob("utils/gpucourse/**/*.py"),
        *root.glob("tools/**/*.py"),
        *(p for p in root.glob("tests/**/*.py") if "fixtures" not in p.parts),
    ]
    missing = []
    for path in texts:
        for number, text in _prose(path):
            for match in REPO_PATH.finditer(text):
                named = match.group(1).rstrip("/.")
                pattern = re.sub(r"<[^>]*>|NN_topic|(?<=/)topic(?=\.)|NN", "*", named)
                if not any(root.glob(pattern)):
                    missing.append(f"{path.relative_to(root)}:{number}: {named}")
    assert not missing, "named, but not in the repository:\n" + "\n".join(missing)
