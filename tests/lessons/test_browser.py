"""Lesson 01 in JupyterLab, in a real browser, run from the UI the way a learner runs it.

A `jupyter lab` server from the course environment serves a scratch copy of
lesson 01 on a free loopback port, behind a token. Headless Chromium (Debian's
`chromium` package, driven by Playwright: no browser download) opens the
notebook, runs it with a click in the menu (Run > Run All Cells), saves it and
reads back what the learner saw:

- the student notebook: it renders, the set-up cell succeeds, Run All stops at the
  first exercise's test cell with the NotImplementedError and the course's hint;
  a learner who carries on (Run > Run Selected Cell and All Below's command from the next
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
its notebook in the running JupyterLab. Waits are on conditions only, never fixed sleeps, clicks
or runs retried: one menu click (Run > Run All Cells) is the learner's path through the menu; the
other runs, the selection and the saves go through JupyterLab's commands, whose promises settle
when the work is done (COURSE_TEST); what the page shows is checked with Playwright's assertions,
which retry until it holds.

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

try:
    from playwright.sync_api import expect

    expect.set_options(timeout=30_000)  # what the page shows, retried until it holds or 30 s pass
except ImportError:  # the tests skip and say why (why_no_browser)
    expect = None

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


# What the tests do in the page, through JupyterLab's commands. A command returns a promise that
# settles once its work is done: `notebook:run-*` once the cells it queued ran (or, when one
# fails, once that cell's reply is in), `docmanager:save` once saved. A promise is followed
# (`follow`): the test waits on `courseTest.outcome` with a deadline, so a run that never ends fails
# at the deadline instead of hanging. A run ends with a kernel_info request: the kernel answers
# requests in order, so once it answers this one it has answered every request of the run (those a
# failed cell cancelled too), and the next run meets a kernel that runs what it is sent.
COURSE_TEST = """() => {
    const app = window.jupyterapp;
    const panel = () => app.shell.currentWidget;
    const answered = () => panel().sessionContext.session.kernel.requestKernelInfo();
    const test = window.courseTest = {
        outcome: {state: 'done'},
        seen: [],
        follow(promise) {
            const outcome = test.outcome = {state: 'pending'};
            promise.then(
                value => Object.assign(outcome, {state: 'done', value}),
                error => Object.assign(outcome, {state: 'failed', error: String(error)}),
            );
        },
        open: path => test.follow((async () => {
            const widget = await app.commands.execute('docmanager:open', {path});
            await widget.context.ready;
            await widget.sessionContext.ready;
            const kernel = widget.sessionContext.session?.kernel;
            if (!kernel) throw new Error(`${path} has no kernel`);
            await kernel.info;  // the kernel is started and has answered
            await widget.revealed;
        })()),
        select(index) {  // as a click on the cell's prompt does: the cell active, command mode
            const notebook = panel().content;
            notebook.mode = 'command';
            notebook.activeCellIndex = index;
            notebook.deselectAll();
            notebook.activate();
        },
        run: (command, indices) => test.follow((async () => {
            const ran = [];
            for (const index of indices ?? [null]) {
                if (index !== null) test.select(index);
                ran.push(await app.commands.execute(command));
            }
            await answered();
            return ran;
        })()),
        save: () => test.follow(app.commands.execute('docmanager:save')),
        // The commands a click or a key press executes: watch([...ids]), act, followWatched().
        watch(ids) {
            test.seen = [];
            const seen = (_, {id, result}) => ids.includes(id) && test.seen.push(result);
            app.commands.commandExecuted.connect(seen);
            test.unwatch = () => app.commands.commandExecuted.disconnect(seen);
        },
        followWatched() {
            test.unwatch();
            const runs = Promise.all(test.seen);
            test.follow(runs.then(async ran => { await answered(); return ran; }));
        },
    };
}"""


def start_lab(page, base: str, token: str) -> None:
    """Load JupyterLab in the page, in a fresh workspace (JupyterLab reopens a workspace's tabs)."""
    page.goto(f"{base}/lab/workspaces/browser-tests?reset&token={token}")
    page.wait_for_function("() => window.jupyterapp !== undefined", timeout=120_000)
    page.evaluate(COURSE_TEST)
    page.evaluate("() => courseTest.follow(window.jupyterapp.restored)")
    settled(page, "JupyterLab's start", timeout_s=120)


def settled(page, what: str, timeout_s: float = RUN_TIMEOUT_S):
    """Wait until the promise the page follows settles; what it resolved to."""
    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    try:
        page.wait_for_function(
            "() => courseTest.outcome.state !== 'pending'", polling=100, timeout=timeout_s * 1000
        )
    except PlaywrightTimeout:
        raise AssertionError(f"{what} did not finish in {timeout_s:.0f} s") from None
    outcome = page.evaluate("() => courseTest.outcome")
    assert outcome["state"] == "done", f"{what} failed in the page: {outcome.get('error')}"
    return outcome.get("value")


def expect_idle(page) -> None:
    """What the learner sees once a run is over: the kernel idle, no cell queued or running."""
    expect(
        page.locator(f"{PANEL} .jp-Notebook-ExecutionIndicator"), "the kernel is idle"
    ).to_have_attribute("data-status", "idle")
    expect(
        page.locator(f"{NOTEBOOK} .jp-InputPrompt", has_text="*"), "no cell is queued or running"
    ).to_have_count(0)


def open_notebook(page, relpath: str) -> None:
    """Open a notebook in the JupyterLab the page holds (as the file browser does); wait until it
    renders in front, its kernel started and idle."""
    page.evaluate("path => courseTest.open(path)", relpath)
    settled(page, f"opening {relpath}", timeout_s=120)
    expect(page.locator(".jp-mod-current.lm-TabBar-tab")).to_have_attribute(
        "title", re.compile(re.escape(relpath))
    )
    expect(page.locator(f"{NOTEBOOK} .jp-Cell").first).to_be_visible()
    expect_idle(page)


def menu(page, top: str, command: str) -> None:
    """Click a menu item, e.g. menu(page, "Run", "runmenu:run-all"), as a learner does."""
    page.locator(".lm-MenuBar-item", has_text=top).first.click()
    page.locator(f'.lm-Menu-item[data-command="{command}"]').first.click()


def run_from_menu(page, top: str, command: str) -> None:
    """Run cells with a click in a menu, e.g. run_from_menu(page, "Run", "runmenu:run-all"), as
    a learner does; wait until the command the click executed is done."""
    watched(page, [command], lambda: menu(page, top, command), f"{top} > {command}", 1)


def watched(page, commands: list[str], act, what: str, times: int):
    """Do ``act()`` (a click, key presses), which executes one of ``commands`` ``times`` times;
    wait until the commands are done (and the kernel has answered what they sent)."""
    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    page.evaluate("ids => courseTest.watch(ids)", commands)
    act()
    try:
        page.wait_for_function(
            "times => courseTest.seen.length >= times", arg=times, polling=100, timeout=30_000
        )
    except PlaywrightTimeout:
        ran = page.evaluate("() => courseTest.seen.length")
        raise AssertionError(f"{what} executed {commands} {ran} of {times} times") from None
    page.evaluate("() => courseTest.followWatched()")
    ran = settled(page, what)
    expect_idle(page)
    return ran


def run_command(page, command: str, cells: list[int] | None = None):
    """Run a notebook command (``notebook:run-*``), on each of ``cells`` in turn (selected first)
    if given; wait until it is done. What each run resolved to (False: a cell failed)."""
    page.evaluate("([command, cells]) => courseTest.run(command, cells)", [command, cells])
    ran = settled(page, command)
    expect_idle(page)
    return ran


def run_cells(page, indices: list[int]) -> None:
    """Run each cell (selected, then Run > Run Selected Cell's command: a click on a collapsed
    cell would expand it); wait until each has run."""
    ran = run_command(page, "notebook:run-cell", indices)
    assert len(ran) == len(indices), f"Run Selected Cell ran {len(ran)} of {len(indices)} cells"


def select_cell(page, index: int) -> None:
    """Make a cell the active one in command mode, the keyboard's focus in the notebook (as a
    click on its prompt does): JupyterLab says so in the page."""
    page.evaluate("i => courseTest.select(i)", index)
    expect(page.locator(f"{NOTEBOOK} .jp-Cell").nth(index), f"cell {index} active").to_have_class(
        re.compile(r"(^|\s)jp-mod-active(\s|$)")
    )
    page.wait_for_function(
        "selector => document.querySelector(selector).contains(document.activeElement)",
        arg=NOTEBOOK,
        polling=100,
        timeout=30_000,
    )


def type_into_cell(page, index: int, text: str) -> None:
    """Replace a code cell's text as a learner does: click into its editor, select all, type,
    leave the editor."""
    page.locator(f"{NOTEBOOK} .jp-Cell").nth(index).locator(".cm-content").click()
    page.keyboard.press("Control+a")
    page.keyboard.insert_text(text)
    page.keyboard.press("Escape")


def save(page, path: Path):
    """Save the notebook (File > Save's command), then read what JupyterLab wrote (the server
    answers once written)."""
    with page.expect_response(
        lambda r: r.request.method == "PUT" and "/api/contents/" in r.url, timeout=60_000
    ) as saved:
        page.evaluate("() => courseTest.save()")
        settled(page, "saving", timeout_s=60)
    assert saved.value.ok, f"JupyterLab did not save the notebook: {saved.value.status}"
    return nbformat.read(path, as_version=4)


def code_cells(nb) -> list[tuple[int, object]]:
    return [(i, cell) for i, cell in enumerate(nb.cells) if cell.cell_type == "code"]


def error_of(cell):
    errors = [o for o in cell.get("outputs", []) if o.output_type == "error"]
    return errors[0] if errors else None


def scroll_to_cell(page, index: int) -> None:
    cell = page.locator(f"{NOTEBOOK} .jp-Cell").nth(index)
    cell.scroll_into_view_if_needed()
    expect(cell).to_be_in_viewport()


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
        run_from_menu(page, "Run", "runmenu:run-all")  # the learner's path, through the menu
        took = time.monotonic() - started
        nb = save(page, path)
        expect(
            page.locator(f"{NOTEBOOK} .jp-Cell"), "JupyterLab renders every cell of the notebook"
        ).to_have_count(len(nb.cells))
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
        expect(hint, "the learner sees the hint in the page").to_contain_text(
            "An exercise is not answered yet", use_inner_text=True
        )
        shot = screenshot(page, f"browser-{LESSON}-student.png")

        # A learner who carries on: run from the next cell down, again after each error, to the end.
        rounds = 0
        while True:
            nexts = [i for i, c in cells if i > first]
            if not nexts:
                break
            # Run > Run Selected Cell and All Below's command
            run_command(page, "notebook:run-all-below", [nexts[0]])
            rounds += 1
            nb = save(page, path)
            cells = code_cells(nb)
            assert dict(cells)[nexts[0]].execution_count, (
                f"Run Selected Cell and All Below from cell {nexts[0]} ran it"
            )
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
        watched(
            page,
            ["notebook:run-cell-and-select-next"],  # Shift+Enter's command
            lambda: [page.keyboard.press("Shift+Enter") for _ in range(start, plot + 1)],
            "Shift+Enter",
            plot + 1 - start,
        )
        answered = dict(code_cells(save(page, path)))
        image = page.locator(f"{NOTEBOOK} .jp-Cell").nth(plot).locator(".jp-OutputArea-output img")
        scroll_to_cell(page, plot)
        expect(image.first, "the plot renders in the page").to_be_visible()
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
        expect(shown).to_have_count(len(before.cells))
        for i in checks:  # collapsed: a placeholder with the check's title, no editor
            cell = shown.nth(i)
            title = before.cells[i].source.splitlines()[0]
            placeholder = cell.locator(".jp-InputPlaceholder")
            expect(placeholder, f"cell {i} ({title}) is collapsed").to_have_count(1)
            expect(placeholder).to_contain_text("GPU check:", use_inner_text=True)
            code = cell.locator(".cm-editor")
            expect(code, f"cell {i} ({title}) hides its code").to_have_count(0)
        for i in lesson_code:  # the lesson's own code stays in view
            expect(
                shown.nth(i).locator(".jp-InputPlaceholder"), f"cell {i} is not collapsed"
            ).to_have_count(0)
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
            run_command(page, "notebook:run-all-above", [first_test])
            setup = next(i for i, c in enumerate(nb.cells) if c.cell_type == "code")
            top = page.locator(f"{NOTEBOOK} .jp-Cell").nth(setup - 1)
            top.evaluate("cell => cell.scrollIntoView({block: 'start'})")
            expect(top).to_be_in_viewport()
            DOCS_SCREENSHOT.parent.mkdir(exist_ok=True)
            page.screenshot(path=str(DOCS_SCREENSHOT))
    return DOCS_SCREENSHOT


if __name__ == "__main__":
    if "--docs-screenshot" in sys.argv:
        print(f"wrote {docs_screenshot().relative_to(ck.ROOT)}")
