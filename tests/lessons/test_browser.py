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
their title in place of their code, while the lesson's cells show theirs; the learner runs the
checks and the cells they read (Run Selected Cell), which run without an error, each check says
one sentence on a CPU, and the saved checks are still collapsed. That every cell of the solution
runs without an error is nbval's (tests/lessons/test_nbval.py runs them all; a second Run All here
cost the lesson's demos again), and from the UI the student notebook's run above runs every cell
it shares with the solution; what only a browser shows (cells render collapsed or not, the kernel
runs from the UI, a plot renders, edits run) is these tests'.

Both tests share one JupyterLab server and one Chromium page (a module-scoped fixture): each opens
its notebook in the running JupyterLab; waits are on conditions in the page, never fixed sleeps.

Screenshots go to test-artifacts/ (git-ignored). Without Chromium or Playwright
the tests skip and say why; `.ci/run` installs Debian's chromium first.

    python tests/lessons/test_browser.py --docs-screenshot   # rewrite docs/lesson01-jupyterlab.png
"""

from __future__ import annotations

import ast
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
from dataclasses import dataclass
from pathlib import Path

import coursekit as ck
import nbformat
import pytest
from browserkit import chromium_page, failure_screenshot, screenshot, why_no_browser

# CI installs what these need (.ci/run): a skip there fails
pytestmark = pytest.mark.ci_required
LESSON = "01_verify_gpu"
# the exercises whose answers the lesson's plot (plots.bars(rates...)) uses
PLOT_NEEDS = ("stopwatch", "matmul_tflops")
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
    # CI containers run as root
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
            "--LabApp.expose_app_in_browser=True",  # window.jupyterapp: the tests open notebooks
            *(["--allow-root"] if os.geteuid() == 0 else []),
        ],
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


def start_lab(page, base: str, token: str) -> None:
    """Load JupyterLab in the page, in a fresh workspace (JupyterLab reopens a workspace's tabs)."""
    page.goto(f"{base}/lab/workspaces/browser-tests?reset&token={token}")
    page.wait_for_function("() => window.jupyterapp !== undefined", timeout=120_000)
    page.evaluate(
        "async () => { await window.jupyterapp.started; await window.jupyterapp.restored; }"
    )


def open_notebook(page, relpath: str) -> None:
    """Open a notebook in the JupyterLab the page holds (as the file browser does); wait until it
    renders in front, its kernel idle."""
    page.evaluate(
        "async path => { await window.jupyterapp.commands.execute('docmanager:open', {path}); }",
        relpath,
    )
    page.wait_for_function(
        """path => {
            const panel = document.querySelector('PANEL');
            const tab = document.querySelector('.jp-mod-current.lm-TabBar-tab');
            return panel && panel.querySelector('.jp-Cell') && tab && tab.title.includes(path);
        }""".replace("PANEL", PANEL),
        arg=relpath,
        timeout=120_000,
    )
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


# For each cell of the notebook in front, from JupyterLab's model: None for a markdown cell, else
# its execution count (0 before it runs) and whether it shows an error.
CELLS = """() => window.jupyterapp.shell.currentWidget.content.widgets.map(w =>
    w.model.type !== 'code' ? null : [
        w.model.executionCount || 0,
        w.model.outputs.toJSON().some(o => o.output_type === 'error'),
    ])"""


def ran_since(cells, before) -> list[int]:
    """The cells whose execution count changed since ``before`` (CELLS then)."""
    return [i for i, (c, b) in enumerate(zip(cells, before, strict=True)) if c and c[0] != b[0]]


def ran_something(cells, before) -> bool:
    """A run from the menu is over once the notebook is idle (``wait_idle``: no cell queued or
    running) and it ran a cell. What it ran is read from the saved notebook: waiting here for its
    last cell to show an error once waited out the deadline on a notebook idle for minutes."""
    return bool(ran_since(cells, before))


class NothingRan(AssertionError):
    """A run was started (its cells were queued) and ended with no cell run."""


def run_from_menu(page, command: str, cell: int | None = None) -> None:
    """Select ``cell`` (if given), run cells from the Run menu and wait until the run is over
    (``ran_something``). A run that ran nothing (the selection moved, or the kernel turned the
    request down while still clearing the queue behind an earlier error) is run again, once, as a
    learner who sees nothing happen would."""
    for attempt in (1, 2):
        if cell is not None:
            select_cell(page, cell)
        try:
            return run_and_wait(page, lambda: menu(page, "Run", command), command, ran_something)
        except NothingRan:
            if attempt == 2:
                raise


def run_and_wait(page, start, what: str, over) -> None:
    """Run cells with ``start()`` and wait for them: first a prompt must change ([*] or a new
    count), then the notebook idle with ``over(CELLS now, CELLS before)`` true (between two cells
    of a run the kernel may look idle a moment)."""
    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    since = page.evaluate(CELLS)
    before = page.evaluate(PROMPTS)
    start()
    try:
        page.wait_for_function(f"before => ({PROMPTS})() !== before", arg=before, polling=50)
    except PlaywrightTimeout:
        raise AssertionError(f"{what} started no cell") from None
    deadline = time.monotonic() + RUN_TIMEOUT_S
    while True:
        wait_idle(page)
        cells = page.evaluate(CELLS)
        if over(cells, since):
            return
        # idle, and no cell ran: the run started nowhere it should (never wait out the deadline)
        if not ran_since(cells, since):
            raise NothingRan(f"{what} ran no cell (cell {page.evaluate(ACTIVE)} is the active one)")
        assert time.monotonic() < deadline, f"{what} did not finish in {RUN_TIMEOUT_S} s"


def run_cells(page, indices: list[int]) -> None:
    """Run each cell (selected, then Run > Run Selected Cell's command: a click on a collapsed
    cell would expand it); wait until each has run."""

    def start():
        page.evaluate(
            """async indices => {
                const notebook = window.jupyterapp.shell.currentWidget.content;
                for (const index of indices) {
                    notebook.activeCellIndex = index;
                    notebook.deselectAll();
                    await window.jupyterapp.commands.execute('notebook:run-cell');
                }
            }""",
            indices,
        )

    def over(cells, before):
        return set(indices) <= set(ran_since(cells, before))

    run_and_wait(page, start, "Run Selected Cell", over)


def type_into_cell(page, index: int, text: str) -> None:
    """Replace a code cell's text as a learner does: click into its editor, select all, type,
    leave the editor."""
    page.locator(f"{NOTEBOOK} .jp-Cell").nth(index).locator(".cm-content").click()
    page.keyboard.press("Control+a")
    page.keyboard.insert_text(text)
    page.keyboard.press("Escape")


# True when no cell is queued or running ([*]) and the kernel is started and idle.
IDLE = """() => {
    const prompts = [...document.querySelectorAll('NOTEBOOK .jp-InputPrompt')];
    const status = document.querySelector('PANEL .jp-Notebook-ExecutionIndicator');
    const kernel = status ? status.getAttribute('data-status') : 'unknown';
    // The indicator also says idle while the kernel is still starting: the status bar tells them
    // apart.
    const bar = [...document.querySelectorAll('.jp-StatusBar-TextItem')]
        .map(e => e.textContent.trim());
    const ready = bar.some(t => t.endsWith('| Idle') && !t.startsWith('No Kernel'));
    const running = prompts.some(p => p.textContent.includes('*'));
    return !running && kernel === 'idle' && ready;
}""".replace("NOTEBOOK", NOTEBOOK).replace("PANEL", PANEL)


def wait_idle(page, timeout_s: float = RUN_TIMEOUT_S) -> None:
    """Wait until the notebook is idle (IDLE), and still is a moment later."""
    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    deadline = time.monotonic() + timeout_s
    while True:
        left_ms = (deadline - time.monotonic()) * 1000
        try:
            assert left_ms > 0
            page.wait_for_function(IDLE, polling=100, timeout=left_ms)
        except (AssertionError, PlaywrightTimeout):
            raise AssertionError(f"the notebook was still running after {timeout_s} s") from None
        page.wait_for_timeout(200)
        if page.evaluate(IDLE):
            return


def save(page, path: Path):
    """File > Save Notebook, then read what JupyterLab wrote (the server answers once written)."""
    with page.expect_response(
        lambda r: r.request.method == "PUT" and "/api/contents/" in r.url, timeout=30_000
    ) as saved:
        menu(page, "File", "docmanager:save")
    assert saved.value.ok, f"JupyterLab did not save the notebook: {saved.value.status}"
    return nbformat.read(path, as_version=4)


def code_cells(nb) -> list[tuple[int, object]]:
    return [(i, cell) for i, cell in enumerate(nb.cells) if cell.cell_type == "code"]


def error_of(cell):
    errors = [o for o in cell.get("outputs", []) if o.output_type == "error"]
    return errors[0] if errors else None


def scroll_to_cell(page, index: int) -> None:
    page.locator(f"{NOTEBOOK} .jp-Cell").nth(index).scroll_into_view_if_needed()
    page.wait_for_timeout(300)


ACTIVE = "() => window.jupyterapp.shell.currentWidget.content.activeCellIndex"


def select_cell(page, index: int) -> None:
    """Click a cell's prompt area: selects it without entering edit mode. A click can land on
    another cell while the page still moves after a run (JupyterLab makes the last cell active when
    Run All Below starts, and outputs still render): the selection is read back, and the learner
    clicks again, until JupyterLab holds the cell active a moment later too."""
    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    cell = page.locator(f"{NOTEBOOK} .jp-Cell").nth(index)
    for _ in range(5):
        cell.scroll_into_view_if_needed()
        cell.locator(".jp-InputPrompt").first.click()
        with contextlib.suppress(PlaywrightTimeout):
            page.wait_for_function(f"i => ({ACTIVE})() === i", arg=index, timeout=2_000)
            page.wait_for_timeout(300)
            if page.evaluate(ACTIVE) == index:
                return
    raise AssertionError(
        f"cell {index} could not be selected: cell {page.evaluate(ACTIVE)} is active"
    )


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


@dataclass
class Lab:
    """A JupyterLab server on a scratch copy of the lesson, and a Chromium page that holds it."""

    root: Path
    page: object


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    reason = why_no_browser()
    if reason:
        pytest.skip(reason)
    tmp = tmp_path_factory.mktemp("browser")
    root = scratch_lesson(tmp)
    with jupyter_lab(root, tmp) as (base, token), chromium_page() as page:
        start_lab(page, base, token)
        yield Lab(root, page)


@pytest.mark.slow
def test_student_notebook_in_jupyterlab(lab):
    page, relpath = lab.page, f"notebooks/{LESSON}/{ck.solution_path(LESSON).name}"
    path = lab.root / relpath
    source = ck.read(ck.solution_path(LESSON))
    tests = {c.metadata.nbgrader.grade_id for c in ck.nbgrader_cells(source, "test")}
    answers = {c.metadata.nbgrader.grade_id for c in ck.nbgrader_cells(source, "answer")}

    with failure_screenshot(page):
        started = time.monotonic()
        open_notebook(page, relpath)
        run_from_menu(page, "runmenu:run-all")
        rendered, took = rendered_cells(page), time.monotonic() - started
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
            run_from_menu(page, "notebook:run-all-below", cell=nexts[0])
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
            lambda cells, before: plot in ran_since(cells, before),
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

    not_run = [i for i, c in cells if not c.execution_count]
    assert not not_run, f"every code cell ran in the end, not cells {not_run}"
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


def _names(source: str) -> tuple[set[str], set[str]]:
    """The names a cell's code binds and those it reads (IPython's syntax turned into Python)."""
    from IPython.core.inputtransformer2 import TransformerManager

    bound, read = set(), set()
    for node in ast.walk(ast.parse(TransformerManager().transform_cell(source))):
        if isinstance(node, ast.Name):
            (read if isinstance(node.ctx, ast.Load) else bound).add(node.id)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            bound.add(node.name)
        elif isinstance(node, ast.alias):
            bound.add((node.asname or node.name).split(".")[0])
    return bound, read


def cells_read_by(nb, targets: list[int]) -> list[int]:
    """``targets`` and the code cells above them that bind a name they read, and so on up."""
    wanted, needed = set(), set(targets)
    for i in targets:
        wanted |= _names(nb.cells[i].source)[1]
    for i in reversed(range(max(targets))):
        cell = nb.cells[i]
        if cell.cell_type != "code" or i in needed:
            continue
        bound, read = _names(cell.source)
        if bound & wanted:
            needed.add(i)
            wanted |= read
    return sorted(needed)


@pytest.mark.slow
def test_solution_shows_gpu_checks_collapsed_and_runs_them(lab):
    page, relpath = lab.page, f"solutions/{LESSON}/{ck.solution_path(LESSON).name}"
    path = lab.root / relpath
    before = ck.read(path)
    checks = [i for i, cell in enumerate(before.cells) if is_check(cell)]
    lesson_code = [
        i for i, c in enumerate(before.cells) if c.cell_type == "code" and not is_check(c)
    ]
    assert checks, f"{LESSON} has GPU checks to show collapsed"
    needed = cells_read_by(before, checks)

    with failure_screenshot(page):
        open_notebook(page, relpath)
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
        run_cells(page, needed)
        nb = save(page, path)

    cells = dict(code_cells(nb))
    assert all(cells[i].execution_count for i in needed), "each check and each cell it reads ran"
    errors = [
        f"cell {i}: {error_of(cells[i]).ename}: {error_of(cells[i]).evalue}"
        for i in needed
        if error_of(cells[i])
    ]
    assert not errors, "the GPU checks and the cells they read met errors:\n" + "\n".join(errors)
    for i in checks:
        said = "".join(o.get("text", "") for o in nb.cells[i].outputs).strip()
        assert said and len(said.splitlines()) == 1, (
            f"a GPU check says one sentence, cell {i}: {said!r}"
        )
        assert nb.cells[i].metadata.get("jupyter", {}).get("source_hidden") is True, (
            "still collapsed"
        )
    print(
        f"\nsolution: {len(checks)} GPU checks collapsed, run with the {len(needed) - len(checks)} "
        f"cells they read ({needed}) without error; {shot.name}"
    )


def docs_screenshot() -> Path:
    """docs/lesson01-jupyterlab.png: the student notebook in JupyterLab, run down to the first
    exercise."""
    import tempfile

    with tempfile.TemporaryDirectory(prefix="gpucourse-docs-") as tmp:
        root = scratch_lesson(Path(tmp))
        relpath = f"notebooks/{LESSON}/{ck.solution_path(LESSON).name}"
        nb = ck.read(root / relpath)
        with jupyter_lab(root, Path(tmp)) as (base, token), chromium_page() as page:
            start_lab(page, base, token)
            open_notebook(page, relpath)
            first_test = next(
                i for i, c in enumerate(nb.cells) if c in ck.nbgrader_cells(nb, "test")
            )
            run_from_menu(page, "notebook:run-all-above", cell=first_test)
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
