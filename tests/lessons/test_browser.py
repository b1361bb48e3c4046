"""Lesson 01 in JupyterLab, in a real browser, run from the UI the way a learner runs it.

A `jupyter lab` server from the course environment serves a scratch copy of
lesson 01 on a free loopback port, behind a token. Headless Chromium (Debian's
`chromium` package, driven by Playwright: no browser download) opens the
notebook, runs it from the menu (Run > Run All Cells), waits until the kernel is
idle, saves it from the menu and reads back what the learner saw:

- the student notebook: it renders, the set-up cell succeeds, Run All stops at the
  first exercise's test cell with the NotImplementedError and the course's hint;
  a learner who carries on (Run > Run Selected Cell and All Below from the next
  cell, again after each error) meets that same error at every unanswered
  exercise and in the cells that use its answer, and no other error;
- then the learner types the answers of the two exercises the lesson's plot needs into their
  cells and runs from the first of them down to the plot (Shift+Enter): those test cells pass and
  the plot renders in the page.

The solution notebook, in a second test: its GPU checks (cells tagged `gpu-check`) show collapsed,
their title in place of their code, while the lesson's cells show theirs; Run All runs every cell
without an error, and each check says one sentence on a CPU. nbval runs every cell as well; what
only a browser shows (cells render collapsed or not, the kernel runs from the UI, a plot renders,
edits run) is these tests'.

Screenshots go to test-artifacts/ (git-ignored). Without Chromium or Playwright
the tests skip and say why; `.ci/run` installs Debian's chromium first.

    python tests/lessons/test_browser.py --docs-screenshot   # rewrite docs/lesson01-jupyterlab.png
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import secrets
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import coursekit as ck
import nbformat
import pytest
from browserkit import chromium_page, screenshot, why_no_browser

LESSON = "01_verify_gpu"
PLOT_NEEDS = (
    "stopwatch",
    "matmul_tflops",
)  # the exercises whose answers the lesson's plot (plots.bars(rates...)) uses
DOCS_SCREENSHOT = ck.ROOT / "docs" / "lesson01-jupyterlab.png"
RUN_TIMEOUT_S = (
    300  # the lesson's cells take about 45 s on 2 cores; TensorFlow's first import is the slow part
)
# What JupyterLab needs to know before it starts: show every cell in the page (no windowing, so each
# is in the DOM to check), and never ask about or fetch news from the network.
PANEL = ".jp-NotebookPanel:not(.lm-mod-hidden)"  # the notebook tab in front
NOTEBOOK = f"{PANEL} .jp-Notebook"
LAB_SETTINGS = {
    "@jupyterlab/notebook-extension/tracker.jupyterlab-settings": {"windowingMode": "none"},
    "@jupyterlab/apputils-extension/notification.jupyterlab-settings": {
        "fetchNews": "false",
        "checkForUpdates": False,
    },
}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def jupyter_lab(root: Path, scratch: Path):
    """A JupyterLab server on ``root``, its settings, runtime files and log under ``scratch``;
    yields its base URL and token."""
    port, token = _free_port(), secrets.token_hex(16)
    settings = scratch / "lab-settings"
    for name, value in LAB_SETTINGS.items():
        (settings / name).parent.mkdir(parents=True, exist_ok=True)
        (settings / name).write_text(json.dumps(value))
    env = ck.env()
    env.pop("GPUCOURSE_REQUIRE_GPU", None)
    env.update(
        JUPYTER_CONFIG_DIR=str(scratch / "config"),
        JUPYTER_RUNTIME_DIR=str(scratch / "runtime"),
        JUPYTERLAB_SETTINGS_DIR=str(settings),
        JUPYTERLAB_WORKSPACES_DIR=str(scratch / "workspaces"),
    )
    log = (scratch / "jupyter-lab.log").open("w")
    server = subprocess.Popen(
        [
            str(Path(sys.executable).parent / "jupyter"),
            "lab",
            "--no-browser",
            "--ip=127.0.0.1",
            f"--port={port}",
            "--ServerApp.port_retries=0",
            f"--IdentityProvider.token={token}",
            f"--ServerApp.root_dir={root}",
            "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate",
            *(["--allow-root"] if os.geteuid() == 0 else []),
        ],  # CI containers run as root
        cwd=root,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while True:
            if server.poll() is not None:
                raise RuntimeError(
                    f"jupyter lab exited ({server.returncode}):\n"
                    + (scratch / "jupyter-lab.log").read_text()
                )
            try:
                with urllib.request.urlopen(f"{base}/api/status?token={token}", timeout=5):
                    break
            except OSError:
                if time.monotonic() > deadline:
                    raise RuntimeError("jupyter lab did not answer within 120 s") from None
                time.sleep(0.5)
        yield base, token
    finally:
        server.terminate()
        try:
            server.wait(timeout=20)
        except subprocess.TimeoutExpired:
            server.kill()
        log.close()


def open_notebook(page, base: str, token: str, relpath: str) -> None:
    """Open a notebook in a fresh JupyterLab workspace; wait until it renders, its kernel idle."""
    workspace = Path(relpath).parts[
        0
    ]  # one per test: JupyterLab reopens a workspace's earlier tabs
    page.goto(f"{base}/lab/workspaces/{workspace}/tree/{relpath}?reset&token={token}")
    page.locator(f"{NOTEBOOK} .jp-Cell").first.wait_for()
    wait_idle(page, timeout_s=120)


def rendered_cells(page) -> int:
    return page.locator(f"{NOTEBOOK} .jp-Cell").count()


def menu(page, top: str, command: str) -> None:
    """Click a menu item, e.g. menu(page, "Run", "runmenu:run-all"), as a learner does."""
    page.locator(".lm-MenuBar-item", has_text=top).first.click()
    item = page.locator(f'.lm-Menu-item[data-command="{command}"]').first
    item.wait_for(state="visible")
    item.click()


PROMPTS = (
    f"() => [...document.querySelectorAll('{NOTEBOOK} .jp-InputPrompt')]"
    ".map(p => p.textContent).join('|')"
)


def run_from_menu(page, command: str) -> None:
    """Run cells from the Run menu and wait for them."""
    run_and_wait(page, lambda: menu(page, "Run", command), command)


def run_and_wait(page, start, what: str) -> None:
    """Run cells with ``start()`` and wait for them: first a prompt must change ([*] or a new
    count), then idle."""
    before = page.evaluate(PROMPTS)
    start()
    deadline = time.monotonic() + 60
    while page.evaluate(PROMPTS) == before:
        assert time.monotonic() < deadline, f"{what} started no cell"
        page.wait_for_timeout(100)
    wait_idle(page)


def type_into_cell(page, index: int, text: str) -> None:
    """Replace a code cell's text as a learner does: click into its editor, select all, type,
    leave the editor."""
    page.locator(f"{NOTEBOOK} .jp-Cell").nth(index).locator(".cm-content").click()
    page.keyboard.press("Control+a")
    page.keyboard.insert_text(text)
    page.keyboard.press("Escape")


def wait_idle(page, timeout_s: float = RUN_TIMEOUT_S) -> None:
    """Wait until no cell is queued or running ([*]) and the kernel is started and idle, twice
    in a row."""
    deadline, calm = time.monotonic() + timeout_s, 0
    while calm < 2:
        busy = page.evaluate(
            """() => {
                const prompts = [...document.querySelectorAll('NOTEBOOK .jp-InputPrompt')];
                const status = document.querySelector('PANEL .jp-Notebook-ExecutionIndicator');
                const kernel = status ? status.getAttribute('data-status') : 'unknown';
                // The indicator also says idle while the kernel is still starting: the status
                // bar tells them apart.
                const bar = [...document.querySelectorAll('.jp-StatusBar-TextItem')]
                    .map(e => e.textContent.trim());
                const ready = bar.some(t => t.endsWith('| Idle') && !t.startsWith('No Kernel'));
                const running = prompts.some(p => p.textContent.includes('*'));
                return running || kernel !== 'idle' || !ready;
            }""".replace("NOTEBOOK", NOTEBOOK).replace("PANEL", PANEL)
        )
        calm = 0 if busy else calm + 1
        if time.monotonic() > deadline:
            raise AssertionError(f"the notebook was still running after {timeout_s} s")
        page.wait_for_timeout(500)


def save(page, path: Path):
    """File > Save Notebook, then read what JupyterLab wrote."""
    before = path.stat().st_mtime_ns
    menu(page, "File", "docmanager:save")
    deadline = time.monotonic() + 30
    while path.stat().st_mtime_ns == before:
        assert time.monotonic() < deadline, "JupyterLab did not save the notebook"
        time.sleep(0.2)
    time.sleep(0.5)  # let the write finish
    return nbformat.read(path, as_version=4)


def code_cells(nb) -> list[tuple[int, object]]:
    return [(i, cell) for i, cell in enumerate(nb.cells) if cell.cell_type == "code"]


def error_of(cell):
    errors = [o for o in cell.get("outputs", []) if o.output_type == "error"]
    return errors[0] if errors else None


def scroll_to_cell(page, index: int) -> None:
    page.locator(f"{NOTEBOOK} .jp-Cell").nth(index).scroll_into_view_if_needed()
    page.wait_for_timeout(300)


def select_cell(page, index: int) -> None:
    """Click a cell's prompt area: selects it without entering edit mode."""
    cell = page.locator(f"{NOTEBOOK} .jp-Cell").nth(index)
    cell.scroll_into_view_if_needed()
    cell.locator(".jp-InputPrompt").first.click()


def scratch_lesson(tmp: Path) -> Path:
    """The lesson's student and solution notebooks, copied: the repository's are never written."""
    root = tmp / "course"
    for kind in ("notebooks", "solutions"):
        shutil.copytree(
            ck.ROOT / kind / LESSON,
            root / kind / LESSON,
            ignore=shutil.ignore_patterns(".ipynb_checkpoints", "__pycache__"),
        )
    return root


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    reason = why_no_browser()
    if reason:
        pytest.skip(reason)
    tmp = tmp_path_factory.mktemp("browser")
    root = scratch_lesson(tmp)
    with jupyter_lab(root, tmp) as (base, token):
        yield root, base, token


def _run_all(page, base, token, relpath):
    started = time.monotonic()
    open_notebook(page, base, token, relpath)
    run_from_menu(page, "runmenu:run-all")
    return rendered_cells(page), time.monotonic() - started


@pytest.mark.slow
def test_student_notebook_in_jupyterlab(lab):
    root, base, token = lab
    relpath = f"notebooks/{LESSON}/{ck.solution_path(LESSON).name}"
    path = root / relpath
    source = ck.read(ck.solution_path(LESSON))
    tests = {c.metadata.nbgrader.grade_id for c in ck.nbgrader_cells(source, "test")}
    answers = {c.metadata.nbgrader.grade_id for c in ck.nbgrader_cells(source, "answer")}

    with chromium_page() as page:
        rendered, took = _run_all(page, base, token, relpath)
        nb = save(page, path)
        assert rendered == len(nb.cells), (
            f"JupyterLab rendered {rendered} of the notebook's {len(nb.cells)} cells"
        )
        cells = code_cells(nb)
        _, setup = cells[0]
        assert setup.execution_count and not error_of(setup), (
            f"the set-up cell failed: {error_of(setup)}"
        )
        said = "".join(o.get("text", "") for o in setup.outputs)
        assert "Using cuda" in said or "Falling back to the CPU" in said, (
            f"the set-up cell says which device: {said!r}"
        )

        # Run All stops at the first error: the first exercise's test cell, with the course's hint.
        errors = [(i, c) for i, c in cells if error_of(c)]
        assert errors, "an untouched student notebook must fail at its first exercise"
        first, first_cell = errors[0]
        assert first_cell.metadata.nbgrader.get("grade_id") in tests, (
            f"the first error is in cell {first} ({first_cell.source[:80]!r}), not in an "
            "exercise's test cell:\n" + "\n".join(error_of(first_cell).traceback)[-2000:]
        )
        assert error_of(first_cell).ename == "NotImplementedError"
        assert all(c.execution_count for i, c in cells if i < first), (
            "every cell above the first exercise ran"
        )
        assert not any(c.execution_count for i, c in cells if i > first), (
            "Run All stops at the first error"
        )
        scroll_to_cell(page, first)
        hint = page.locator(f"{NOTEBOOK} .jp-Cell").nth(first).locator(".jp-OutputArea-output")
        assert "An exercise is not answered yet" in hint.inner_text(), (
            "the learner sees the hint in the page"
        )
        shot = screenshot(page, f"browser-{LESSON}-student.png")

        # A learner who carries on: run from the next cell down, again after each error, to the end.
        rounds = 0
        while True:
            nexts = [i for i, c in cells if i > first]
            if not nexts:
                break
            select_cell(page, nexts[0])
            run_from_menu(page, "notebook:run-all-below")
            rounds += 1
            nb = save(page, path)
            cells = code_cells(nb)
            later = [i for i, c in cells if i > first and error_of(c)]
            if not later:
                break
            first = later[0]
        assert rounds <= 12, "too many errors for an untouched notebook"

        # The learner answers the exercises the plot needs, runs from the first down to the plot.
        where = {c.metadata.get("nbgrader", {}).get("grade_id"): i for i, c in cells}
        plot = next(i for i, c in cells if re.search(r"plots\.bars\(\s*rates\b", c.source))
        answers = ck.solution_answers(LESSON)
        for grade_id in PLOT_NEEDS:
            type_into_cell(page, where[grade_id], answers[grade_id])
        start = min(where[grade_id] for grade_id in PLOT_NEEDS)
        select_cell(page, start)
        run_and_wait(
            page,
            lambda: [page.keyboard.press("Shift+Enter") for _ in range(start, plot + 1)],
            "Shift+Enter",
        )
        answered = dict(code_cells(save(page, path)))
        images = (
            page.locator(f"{NOTEBOOK} .jp-Cell")
            .nth(plot)
            .locator(".jp-OutputArea-output img")
            .count()
        )
        scroll_to_cell(page, plot)
        plot_shot = screenshot(page, f"browser-{LESSON}-plot.png")

    assert all(c.execution_count for _, c in cells), "every code cell ran in the end"
    unanswered, unexpected = set(), []
    for i, cell in cells:
        error, grade_id = error_of(cell), cell.metadata.get("nbgrader", {}).get("grade_id")
        if grade_id in answers:
            assert not error, f"defining the exercise {grade_id} must not fail"
            unanswered.add(grade_id)
        if grade_id in tests:
            assert error and error.ename == "NotImplementedError", (
                f"{grade_id} must show the NotImplementedError"
            )
            assert "not answered yet" in "\n".join(error.traceback)
        elif error and not (unanswered and error.ename in {"NotImplementedError", "NameError"}):
            unexpected.append(f"cell {i} ({cell.source[:60]!r}): {error.ename}: {error.evalue}")
        elif error and error.ename == "NameError":
            # A name an unanswered exercise's cells would have defined: the hint says to run
            # earlier cells.
            assert "earlier cell" in "\n".join(error.traceback)
    assert not unexpected, (
        "cells failed for reasons other than an unanswered exercise:\n" + "\n".join(unexpected)
    )

    for grade_id in PLOT_NEEDS:
        cell, test = answered[where[grade_id]], answered[where[f"test_{grade_id}"]]
        assert cell.source == answers[grade_id], (
            f"JupyterLab saved the typed answer of {grade_id} as typed"
        )
        for ran in (cell, test):
            assert ran.execution_count and not error_of(ran), (
                f"{ran.metadata.nbgrader.grade_id} once answered: {error_of(ran)}"
            )
    assert not error_of(answered[plot]) and any(
        "image/png" in o.get("data", {}) for o in answered[plot].outputs
    ), "the plot cell draws its figure once the exercises it needs are answered"
    assert images >= 1, "the plot renders in the page"
    failed = [c.metadata.get("nbgrader", {}).get("grade_id") or i for i, c in cells if error_of(c)]
    print(
        f"\nstudent notebook: {len(nb.cells)} cells rendered, Run All in {took:.0f} s, "
        f"{rounds} more runs, errors in {failed}; "
        f"screenshots {shot.relative_to(ck.ROOT)}, {plot_shot.relative_to(ck.ROOT)}"
    )


GPU_CHECK = "gpu-check"  # the tag of a cell that holds a GPU claim (its input starts collapsed)


def is_check(cell) -> bool:
    return GPU_CHECK in cell.metadata.get("tags", [])


@pytest.mark.slow
def test_solution_shows_gpu_checks_collapsed_and_runs_without_error(lab):
    root, base, token = lab
    relpath = f"solutions/{LESSON}/{ck.solution_path(LESSON).name}"
    path = root / relpath
    before = ck.read(path)
    checks = [i for i, cell in enumerate(before.cells) if is_check(cell)]
    lesson_code = [
        i for i, c in enumerate(before.cells) if c.cell_type == "code" and not is_check(c)
    ]
    assert checks, f"{LESSON} has GPU checks to show collapsed"

    with chromium_page() as page:
        open_notebook(page, base, token, relpath)
        shown = page.locator(f"{NOTEBOOK} .jp-Cell")
        for i in checks:  # collapsed: a placeholder with the check's title, no editor
            cell = shown.nth(i)
            title = before.cells[i].source.splitlines()[0]
            assert cell.locator(".jp-InputPlaceholder").count() == 1, (
                f"cell {i} ({title}) is not collapsed"
            )
            assert cell.locator(".cm-editor").count() == 0, f"cell {i} ({title}) shows its code"
            assert "GPU check:" in cell.locator(".jp-InputPlaceholder").inner_text()
        for i in lesson_code:  # the lesson's own code stays in view
            assert shown.nth(i).locator(".jp-InputPlaceholder").count() == 0, (
                f"cell {i} is collapsed"
            )
        scroll_to_cell(page, checks[0])
        shot = screenshot(page, f"browser-{LESSON}-solution-checks.png")
        run_from_menu(page, "runmenu:run-all")
        nb = save(page, path)

    cells = code_cells(nb)
    assert all(c.execution_count for _, c in cells), "Run All ran every code cell of the solution"
    errors = [
        f"cell {i}: {error_of(c).ename}: {error_of(c).evalue}" for i, c in cells if error_of(c)
    ]
    assert not errors, "Run All of the solution met errors:\n" + "\n".join(errors)
    for i in checks:
        said = "".join(o.get("text", "") for o in nb.cells[i].outputs).strip()
        assert said and len(said.splitlines()) == 1, (
            f"a GPU check says one sentence, cell {i}: {said!r}"
        )
        assert nb.cells[i].metadata.get("jupyter", {}).get("source_hidden") is True, (
            "still collapsed"
        )
    print(f"\nsolution: {len(checks)} GPU checks collapsed, Run All without error; {shot.name}")


def docs_screenshot() -> Path:
    """docs/lesson01-jupyterlab.png: the student notebook in JupyterLab, run down to the first
    exercise."""
    import tempfile

    with tempfile.TemporaryDirectory(prefix="gpucourse-docs-") as tmp:
        root = scratch_lesson(Path(tmp))
        relpath = f"notebooks/{LESSON}/{ck.solution_path(LESSON).name}"
        nb = ck.read(root / relpath)
        with jupyter_lab(root, Path(tmp)) as (base, token), chromium_page() as page:
            open_notebook(page, base, token, relpath)
            first_test = next(
                i for i, c in enumerate(nb.cells) if c in ck.nbgrader_cells(nb, "test")
            )
            select_cell(page, first_test)
            run_from_menu(page, "notebook:run-all-above")
            setup = next(i for i, c in enumerate(nb.cells) if c.cell_type == "code")
            page.locator(f"{NOTEBOOK} .jp-Cell").nth(setup - 1).evaluate(
                "cell => cell.scrollIntoView({block: 'start'})"
            )
            page.wait_for_timeout(500)
            DOCS_SCREENSHOT.parent.mkdir(exist_ok=True)
            page.screenshot(path=str(DOCS_SCREENSHOT))
    return DOCS_SCREENSHOT


if __name__ == "__main__":
    if "--docs-screenshot" in sys.argv:
        print(f"wrote {docs_screenshot().relative_to(ck.ROOT)}")
