"""The reading edition (`make book`, coursetools.book): lesson pages built from executed lessons.

Fast tests pin the page logic on small notebooks (no kernel): hidden tests and nbgrader markers
never reach a page, an exercise shows the learner's version with the model answer folded below it,
a GPU check shows as its result only, remote badges become links, each page says where its outputs
were measured, and the nbval plugin keeps what a run printed.

The slow tests build the site from two executed lessons, 01 and 02: those `make test` keeps in
test-artifacts/executed/ (tests/lessons/test_nbval.py runs each lesson with the plugin
`coursetools.executed`) when they are there and current, else a run of their own. Chromium then
opens both lesson pages from a local server: the plots are drawn, no request leaves the site, and
neither a hidden-test line nor a `### BEGIN` marker is on the page. A screenshot of lesson 02 (its
bandwidth plot) goes to test-artifacts/book-lesson02.png.
"""

from __future__ import annotations

import contextlib
import functools
import html
import http.server
import os
import re
import subprocess
import sys
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import coursekit as ck
import nbformat
import pytest
from browserkit import chromium_page, screenshot, why_no_browser
from coursetools import book, executed
from coursetools.course import HIDDEN, marked_lines

PAGES = ("01_verify_gpu", "02_tensors_on_device")
ARTIFACTS = ck.ROOT / "test-artifacts"


# ---------------------------------------------------------------- the page logic, no kernel


def exercise_notebook():
    """A solution notebook with what a lesson has: a badge, an exercise, its tests with hidden
    ones, a written answer, a GPU check and a demo cell, executed."""
    nb = nbformat.v4.new_notebook()
    badge = "[![Open In Colab](https://colab.research.google.com/assets/colab-badge.svg)](https://c.example/x)"
    answer = nbformat.v4.new_code_cell(
        "def double(x):\n    ### BEGIN SOLUTION\n    return 2 * x\n    ### END SOLUTION"
    )
    answer.metadata["nbgrader"] = {"solution": True, "grade": False, "grade_id": "double"}
    answer.outputs = [nbformat.v4.new_output("stream", text="model answer ran\n")]
    tests = nbformat.v4.new_code_cell(
        "assert double(1) == 2\n### BEGIN HIDDEN TESTS\nassert double(21) == 42, 'secret'\n"
        "### END HIDDEN TESTS"
    )
    tests.metadata["nbgrader"] = {"solution": False, "grade": True, "grade_id": "test_double"}
    written = nbformat.v4.new_markdown_cell(
        "### BEGIN SOLUTION\nBecause the GPU is asynchronous.\n### END SOLUTION"
    )
    written.metadata["nbgrader"] = {"solution": True, "grade": True, "grade_id": "why"}
    check = nbformat.v4.new_code_cell("# @title GPU check\ngpucourse.claims.claim('x', 1)")
    check.metadata["tags"] = ["gpu-check"]
    check.outputs = [nbformat.v4.new_output("stream", text="On a GPU this checks x.\n")]
    bar = nbformat.v4.new_output(
        "display_data",
        data={book.WIDGET_MIME: {"model_id": "abc"}, "text/plain": "100%|##| 3/3"},
    )
    demo = nbformat.v4.new_code_cell("for step in tqdm(range(3)): pass")
    demo.metadata["tags"] = ["demo"]
    demo.outputs = [bar]
    nb.cells = [
        nbformat.v4.new_markdown_cell(f"# A lesson\n\n{badge}"),
        answer,
        tests,
        written,
        check,
        demo,
    ]
    nb.metadata[executed.RUN_KEY] = {
        "device": "CPU: Test CPU, 2 cores",
        "kind": "cpu",
        "when": "2026-01-01 00:00 UTC",
        "commit": "abc1234",
    }
    return nb


def student_notebook():
    student = exercise_notebook()
    student.cells[
        1
    ].source = "def double(x):\n    # YOUR CODE HERE\n    raise NotImplementedError()"
    student.cells[3].source = "YOUR ANSWER HERE"
    return student


def page_text(page) -> str:
    return "\n".join(cell.source for cell in page.cells) + "\n".join(
        str(out) for cell in page.cells for out in cell.get("outputs", [])
    )


def test_a_page_has_no_hidden_test_nor_marker():
    page = book.lesson_page(exercise_notebook(), student_notebook())
    text = page_text(page)
    assert "double(21)" not in text and "secret" not in text, "a hidden test reached the page"
    assert "### BEGIN" not in text and "### END" not in text
    assert book.leaks(text) == []
    (tests,) = [c for c in page.cells if c.source.startswith("assert double(1)")]
    assert tests.source.strip() == "assert double(1) == 2", "the visible test stays"


def test_an_exercise_shows_the_learners_version_then_the_answer_folded():
    page = book.lesson_page(exercise_notebook(), student_notebook())
    codes = [c for c in page.cells if c.cell_type == "code"]
    learner, model = codes[0], codes[1]
    assert "raise NotImplementedError()" in learner.source and learner.outputs == []
    assert model.source == "def double(x):\n    return 2 * x"
    assert model.metadata["tags"] == ["hide-input"], "the model answer is folded"
    assert model.metadata["mystnb"]["code_prompt_show"] == "Show a solution"
    assert model.outputs[0].text == "model answer ran\n", "the answer keeps its outputs"
    written = [c.source for c in page.cells if c.cell_type == "markdown"]
    assert any("Your answer" in s and "YOUR ANSWER HERE" in s for s in written)
    assert any(
        s.startswith("::::{dropdown} Show a solution") and "asynchronous" in s for s in written
    )


def test_without_a_student_notebook_the_stub_is_nbgraders():
    page = book.lesson_page(exercise_notebook())
    learner = [c for c in page.cells if c.cell_type == "code"][0]
    assert learner.source == (
        "def double(x):\n    # YOUR CODE HERE\n    raise NotImplementedError()"
    )


def test_a_gpu_check_shows_its_result_only_and_widgets_their_text():
    page = book.lesson_page(exercise_notebook(), student_notebook())
    (check,) = [c for c in page.cells if "gpu-check" in c.metadata.get("tags", [])]
    assert "remove-input" in check.metadata["tags"]
    assert check.outputs[0].text == "On a GPU this checks x.\n"
    (demo,) = [c for c in page.cells if "tqdm" in c.source]
    assert book.WIDGET_MIME not in demo.outputs[0].data, "a widget view would load a CDN"
    assert demo.outputs[0].data["text/plain"] == "100%|##| 3/3"


def test_a_page_says_where_its_outputs_come_from_and_loads_no_remote_image():
    page = book.lesson_page(exercise_notebook(), student_notebook())
    title, note = page.cells[0].source, page.cells[1].source
    assert "colab-badge.svg" not in title and "[Open In Colab](https://c.example/x)" in title
    assert "CPU: Test CPU, 2 cores" in note and "abc1234" in note and "CPU test run" in note
    gpu_run = exercise_notebook()
    gpu_run.metadata[executed.RUN_KEY].update(device="GPU: NVIDIA L4", kind="gpu")
    gpu_note = book.lesson_page(gpu_run).cells[1].source
    assert (
        "GPU: NVIDIA L4" in gpu_note and "that GPU's" in gpu_note and "CPU test run" not in gpu_note
    )
    unstamped = exercise_notebook()
    del unstamped.metadata[executed.RUN_KEY]
    assert "unrecorded run" in book.lesson_page(unstamped).cells[1].source


def test_the_plugin_keeps_each_cells_outputs_from_the_run():
    source = exercise_notebook()
    for cell in source.cells:
        if cell.cell_type == "code":
            cell.outputs, cell.execution_count = [], None
    ran = nbformat.from_dict(
        {
            "output_type": "execute_result",
            "data": {"text/plain": "4"},
            "metadata": {},
            "execution_count": 3,
        }
    )
    items = [SimpleNamespace(cell=source.cells[1], test_outputs=[ran])]  # the others did not run
    copy = executed.executed_copy(source, items)
    assert copy.cells[1].outputs[0].data["text/plain"] == "4" and copy.cells[1].execution_count == 3
    assert copy.cells[2].outputs == [] and source.cells[1].outputs == [], "the source is untouched"
    assert executed.source_digest(copy) == executed.source_digest(source)
    changed = exercise_notebook()
    changed.cells[1].source += "\n"
    assert executed.source_digest(changed) != executed.source_digest(source)


def test_a_missing_executed_lesson_is_named_with_the_command(tmp_path):
    with pytest.raises(book.BookError, match=r"01_verify_gpu.*--save-executed"):
        book.build(ck.ROOT, tmp_path / "out", ["01_verify_gpu"], [tmp_path / "none"])


# ---------------------------------------------------------------- the site, from executed lessons


def current_executed(lesson: str) -> Path | None:
    """test-artifacts/executed/<lesson>.ipynb when it was executed from today's solution."""
    path = ARTIFACTS / "executed" / f"{lesson}.ipynb"
    if not path.exists():
        return None
    run = nbformat.read(path, as_version=4).metadata.get(executed.RUN_KEY, {})
    source = nbformat.read(ck.solution_path(lesson), as_version=4)
    return path if run.get("source_digest") == executed.source_digest(source) else None


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    """The site of lessons 01 and 02, and the folder of their executed notebooks."""
    folder = tmp_path_factory.mktemp("executed")
    for lesson in PAGES:
        if (kept := current_executed(lesson)) is not None:
            (folder / kept.name).write_bytes(kept.read_bytes())
            continue
        notebook = ck.solution_path(lesson).relative_to(ck.ROOT)
        env = {**os.environ, "PYTHONWARNINGS": "ignore"}
        done = subprocess.run(
            [sys.executable, "-m", "pytest", "--nbval-lax", "-p", "no:xdist", "-p",
             "no:cacheprovider", "-q", "-p", "coursetools.executed", "--save-executed",
             str(folder), str(notebook)],
            cwd=ck.ROOT, env=env, capture_output=True, text=True,
        )  # fmt: skip
        assert done.returncode == 0, f"{notebook} did not run:\n{done.stdout[-4000:]}"
    start = time.monotonic()
    out = tmp_path_factory.mktemp("book")
    html_dir = book.build(ck.ROOT, out, list(PAGES), [folder], strict=True)
    print(f"the site of {len(PAGES)} lessons built in {time.monotonic() - start:.1f} s")
    return SimpleNamespace(html=html_dir, executed=folder)


def hidden_test_lines(lesson: str) -> list[str]:
    """The hidden tests' lines a reader could recognise: long enough to be specific, and nowhere
    else in the lesson."""
    cells = ck.read(ck.solution_path(lesson)).cells
    marked = [line for cell in cells for line in marked_lines(cell.source)]
    elsewhere = "\n".join(line.text for line in marked if line.region != HIDDEN)
    hidden = [line.text.strip() for line in marked if line.region == HIDDEN and not line.marker]
    return [line for line in hidden if len(line) >= 24 and line not in elsewhere]


def visible_text(page_html: str) -> str:
    return html.unescape(re.sub(r"<[^>]+>", "", page_html))


@pytest.mark.slow
@pytest.mark.parametrize("lesson", PAGES)
def test_a_lesson_page_has_its_outputs_and_no_hidden_test(site, lesson):
    page = (site.html / "lessons" / f"{lesson}.html").read_text()
    text = visible_text(page)
    hidden = hidden_test_lines(lesson)
    assert hidden, f"{lesson} has hidden tests to look for"
    shown = [line for line in hidden if line in text]
    assert not shown, f"hidden-test lines on the {lesson} page: {shown}"
    assert "### BEGIN" not in text and "### END" not in text
    run = nbformat.read(site.executed / f"{lesson}.ipynb", as_version=4).metadata[executed.RUN_KEY]
    assert run["device"] in text, "the page says on which device its outputs ran"
    assert re.search(r'<img[^>]+src="\.\./_images/[^"]+\.png"', page), "the lesson's plot"
    assert "Show a solution" in text
    assert 'src="http' not in page, "a page loads nothing from another host"


@pytest.mark.slow
def test_the_home_page_lists_the_lessons_and_the_claims(site):
    index = visible_text((site.html / "index.html").read_text())
    assert "Three ways to start" in index
    for lesson in PAGES:
        assert (site.html / "lessons" / f"{lesson}.html").exists()
    claims = visible_text((site.html / "claims.html").read_text())
    assert "claims catalogue" in claims and "naive stopwatch" in claims


# ---------------------------------------------------------------- in Chromium


@contextlib.contextmanager
def served(folder: Path):
    handler = functools.partial(QuietHandler, directory=str(folder))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


class QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):  # the test reports what matters
        pass


@pytest.mark.slow
def test_chromium_draws_the_plots_and_fetches_nothing_from_outside(site):
    if (why := why_no_browser()) is not None:
        pytest.skip(why)
    with served(site.html) as origin, chromium_page() as page:
        requests: list[str] = []
        page.on("request", lambda request: requests.append(request.url))
        for lesson in PAGES:
            page.goto(f"{origin}/lessons/{lesson}.html", wait_until="networkidle")
            images = page.eval_on_selector_all(
                "article img",
                "imgs => imgs.map(i => [i.getAttribute('src'), i.complete, i.naturalWidth])",
            )
            plots = [img for img in images if "_images/" in img[0]]
            assert plots, f"no plot on the {lesson} page"
            assert all(done and width > 100 for _, done, width in plots), (
                f"a plot on the {lesson} page is not drawn: {plots}"
            )
            text = page.inner_text("article")
            assert "### BEGIN" not in text and "### END" not in text
            shown = [line for line in hidden_test_lines(lesson) if line in text]
            assert not shown, f"hidden-test lines on the {lesson} page: {shown}"
            page.locator("article img[src*='_images/']").last.scroll_into_view_if_needed()
            screenshot(page, f"book-lesson{lesson[:2]}.png")
        outside = [url for url in requests if not url.startswith(origin)]
        assert not outside, f"the pages fetched from outside the site: {outside}"
        assert len(requests) > 2 * len(PAGES), "the pages loaded their styles and images"
