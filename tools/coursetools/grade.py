"""Grade a class: nbgrader autograde with each student's kernel in a sandbox, bounded in time, fair to slips.

    python tools/grade.py NN_topic [--jobs N] [--unsandboxed]      (or: make grade LESSON=NN_topic)

collects the lesson (when an exchange is configured), autogrades every submission in submitted/, several at once,
and prints one line per student: score, failed test cells, cells that timed out, cells that killed the kernel.

nbgrader_config.py puts `GradingExecute` (below) in place of nbgrader's `Execute`, so a plain
`nbgrader autograde` grades the same way. Each kernel runs under bubblewrap (`bwrap`, Debian package
`bubblewrap`): a new root holding only the system (read-only), the Python environment (read-only), the
submission's own autograded folder and a private /tmp and $HOME; no network (its own loopback only); the GPUs'
device files where there are any; an address-space and a CPU-time limit (prlimit). solutions/, the gradebook,
submitted/, the other students' folders and the exchange are simply not there.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from jupyter_client.manager import AsyncKernelManager
from nbclient.exceptions import DeadKernelError
from nbconvert.preprocessors import Preprocessor
from nbformat.notebooknode import NotebookNode
from nbgrader.converters import Autograde
from nbgrader.preprocessors import Execute, OverwriteCells
from nbgrader.preprocessors import SaveAutoGrades as _SaveAutoGrades
from traitlets import Bool, Integer

ROOT = Path(__file__).resolve().parents[2]
TOOL = "bwrap"
UNSANDBOXED = "--GradingExecute.sandbox=False"
WHY = (
    "autograde runs each student's code, and outside a sandbox that code can read solutions/, the gradebook and "
    "the other students' work, or change them. Install the sandbox (Debian/Ubuntu: apt-get install bubblewrap), "
    f"or, for submissions you trust, pass {UNSANDBOXED} (make grade UNSANDBOXED=1)."
)
PASSED_ON = ("NBGRADER_EXECUTION", "PYTHONWARNINGS", "LANG", "LC_ALL", "OMP_NUM_THREADS", "MKL_NUM_THREADS",
             "CUDA_VISIBLE_DEVICES", "NVIDIA_VISIBLE_DEVICES", "NVIDIA_DRIVER_CAPABILITIES", "LD_LIBRARY_PATH")
TIMEOUT, DIED, NOT_RUN = "CellTimeoutError", "KernelDied", "NotRun"


def sandbox_problem(tool: str = TOOL) -> str | None:
    """None when ``tool`` can build a sandbox here; else why not."""
    path = shutil.which(tool)
    if path is None:
        return f"the sandbox tool `{tool}` is not installed"
    probe = subprocess.run([path, "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--unshare-all",
                            "--tmpfs", "/tmp", "true"], capture_output=True, text=True)
    if probe.returncode != 0:
        return f"`{tool}` cannot make a sandbox on this machine: {probe.stderr.strip()}"
    return None


def _python_dirs(python: str) -> list[str]:
    """The folders ``python`` imports from (its install, the environment, editable packages), outermost first."""
    out = subprocess.run([python, "-I", "-c", "import json, sys; print(json.dumps([sys.prefix, sys.base_prefix, *sys.path]))"],
                         capture_output=True, text=True, check=True).stdout
    dirs = sorted({os.path.realpath(p) for p in json.loads(out) if p and os.path.isdir(p)})
    return [d for d in dirs if not any(d.startswith(other + os.sep) for other in dirs if other != d)]


def gpu_passthrough(dev: str = "/dev", ldconfig: str | None = None, environ=os.environ) -> tuple[list[str], list[str]]:
    """What a sandboxed kernel needs to use the GPUs: their device files (``/dev/nvidia*``, WSL2's ``/dev/dxg``),
    and the folders of the NVIDIA driver's libraries (``ldconfig -p``) and of LD_LIBRARY_PATH that the sandbox does
    not show already (it shows /usr, /opt, /etc, /bin and /lib*): a cluster's or NixOS's driver, a site CUDA."""
    devices = sorted(glob.glob(os.path.join(dev, "nvidia*")) + glob.glob(os.path.join(dev, "dxg")))
    if not devices:
        return [], []
    if ldconfig is None:
        try:
            ldconfig = subprocess.run([shutil.which("ldconfig") or "/sbin/ldconfig", "-p"], capture_output=True,
                                      text=True).stdout
        except OSError:
            ldconfig = ""
    found = [path.strip() for name, _, path in (line.partition("=>") for line in ldconfig.splitlines())
             if name.strip().startswith(("libcuda.so", "libnvidia-ml.so")) and path.strip()]
    folders = {os.path.dirname(p) for p in found} | {os.path.dirname(os.path.realpath(p)) for p in found}
    folders |= {d for d in environ.get("LD_LIBRARY_PATH", "").split(os.pathsep) if d}
    shown = ("/usr", "/opt", "/etc", "/bin", "/sbin", "/lib", "/lib32", "/lib64")
    return devices, sorted(d for d in folders if os.path.isdir(d) and not any((d + "/").startswith(s + "/") for s in shown))


def stderr_kept_visible(cell):
    """A graded cell fails by raising, never by writing to stderr: its stderr moves to stdout, in the feedback still.

    nbgrader fails a test cell with any stderr output (``nbgrader.utils.has_failed``), so one line a library logs
    or warns (more of them on a GPU) would zero a right answer. A cell with an error output keeps its outputs.
    """
    outputs = cell.get("outputs", []) if cell.get("cell_type") == "code" else []
    if cell.get("metadata", {}).get("nbgrader", {}).get("grade") and not any(
            o.get("output_type") == "error" for o in outputs):
        for output in outputs:
            if output.get("output_type") == "stream" and output.get("name") == "stderr":
                output.name = "stdout"
    return cell


def sandbox_command(cmd: list[str], *, workdir: str, runtime: str, memory: int, cpu_seconds: int,
                    python_dirs: list[str], devices: list[str], environ: dict, course: str | None = None,
                    tool: str = TOOL, libraries: list[str] = ()) -> list[str]:
    """``cmd`` (a kernel's command line) run by ``tool`` (bubblewrap) in a sandbox, under prlimit's limits.

    Visible: the system read-only, ``python_dirs`` and ``libraries`` read-only, ``workdir`` and ``runtime`` (the
    kernel's connection file and sockets) writable, ``devices`` (the GPUs'), a private /tmp holding $HOME. A Python
    or library folder that holds the course itself is refused: it would show the solutions.
    """
    for d in [*python_dirs, *libraries]:
        if course and (course + os.sep).startswith(d.rstrip(os.sep) + os.sep):
            raise RuntimeError(f"the Python environment imports from {d}, which holds the course {course}: "
                               "the sandbox would show the solutions; install the course's Python elsewhere")
    args = [tool, "--unshare-all", "--die-with-parent", "--new-session", "--cap-drop", "ALL",
            "--ro-bind", "/usr", "/usr", "--ro-bind-try", "/opt", "/opt", "--ro-bind", "/etc", "/etc",
            "--ro-bind-try", "/dev/null", "/etc/shadow", "--ro-bind-try", "/dev/null", "/etc/gshadow",
            "--ro-bind", "/sys", "/sys", "--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp", "--dir", "/tmp/home"]
    for top in ("/bin", "/sbin", "/lib", "/lib32", "/lib64"):
        if os.path.islink(top):
            args += ["--symlink", os.readlink(top), top]
        elif os.path.isdir(top):
            args += ["--ro-bind", top, top]
    for d in [*python_dirs, *libraries]:
        args += ["--ro-bind", d, d]
    for device in devices:
        args += ["--dev-bind", device, device]
    args += ["--bind", runtime, runtime, "--bind", workdir, workdir, "--chdir", workdir, "--clearenv"]
    bin_dir = os.path.dirname(cmd[0]) if os.path.isabs(cmd[0]) else None
    env = {"HOME": "/tmp/home", "TMPDIR": "/tmp", "PATH": ":".join(filter(None, [bin_dir, "/usr/local/bin:/usr/bin:/bin"]))}
    env.update({k: v for k, v in environ.items() if k in PASSED_ON or (k.startswith("GPUCOURSE_") and k != "GPUCOURSE_DATA")})
    for key, value in sorted(env.items()):
        args += ["--setenv", key, value]
    limits = ["prlimit", f"--cpu={cpu_seconds}", "--core=0"] + ([f"--as={memory}"] if memory else [])
    return [*limits, *args, "--", *cmd]


class SandboxedKernelManager(AsyncKernelManager):
    """A kernel manager whose kernel starts inside the sandbox (``sandbox`` holds sandbox_command's options)."""

    sandbox: dict = {}

    def format_kernel_cmd(self, extra_arguments=None):
        cmd = super().format_kernel_cmd(extra_arguments)
        self.kernel_spec.interrupt_mode = "message"  # a signal to bwrap would not reach the kernel inside
        workdir = os.path.realpath(self._launch_args.get("cwd") or os.getcwd())
        return sandbox_command(cmd, workdir=workdir, runtime=os.path.dirname(os.path.realpath(self.connection_file)),
                               environ=dict(os.environ), **self.sandbox)


def _error(ename: str, evalue: str) -> NotebookNode:
    return NotebookNode(output_type="error", ename=ename, evalue=evalue, traceback=[f"{ename}: {evalue}"])


def cell_name(cell, index: int) -> str:
    return cell.metadata.get("nbgrader", {}).get("grade_id") or f"cell {index}"


class GradingExecute(Execute):
    """nbgrader's Execute, with the kernel in a sandbox, a bound per submission, and a dead kernel survived.

    A cell that kills the kernel (os._exit, a segfault, the CPU-time limit) gets a KernelDied error naming it;
    a new kernel re-runs the cells before it and grading goes on after it. Once the submission's time is spent,
    the cells left get a NotRun error (so their tests score zero).
    """

    sandbox = Bool(True, help="Run each kernel under bubblewrap; False grades unsandboxed, for trusted code.").tag(config=True)
    submission_timeout = Integer(900, help="Seconds for a whole submission, kernel restarts included.").tag(config=True)
    memory_limit = Integer(16 * 2**30, help="Address-space limit of a kernel, bytes (0: none; none with GPUs).").tag(config=True)
    cpu_limit = Integer(1800, help="CPU seconds the kernel may use (all its threads together).").tag(config=True)
    kernel_deaths = Integer(2, help="Kernel deaths survived per submission; then the cells left are not run.").tag(config=True)

    def _sandbox_options(self, course: str) -> dict:
        problem = sandbox_problem()
        if problem:
            raise RuntimeError(f"autograde refuses to run: {problem}. {WHY}")
        devices, libraries = gpu_passthrough()
        return {"memory": 0 if devices else self.memory_limit, "cpu_seconds": self.cpu_limit, "devices": devices,
                "libraries": libraries, "python_dirs": _python_dirs(sys.executable), "course": course}

    def create_kernel_manager(self):
        km = super().create_kernel_manager()
        if isinstance(km, SandboxedKernelManager):
            km.sandbox = self._sandbox
            km.transport = "ipc"  # no TCP port reaches into the sandbox's network namespace
            km.connection_file = os.path.join(self._runtime, "kernel.json")
            km.ip = os.path.join(self._runtime, "kernel")
        return km

    def preprocess(self, nb, resources=None, km=None):
        if self.sandbox:
            self._sandbox = self._sandbox_options(os.getcwd())
            self.kernel_manager_class = SandboxedKernelManager
        self._deadline = time.monotonic() + self.submission_timeout
        why = f"no reply within {self.timeout} s: the cell was interrupted and grading went on"
        self.error_on_timeout = {"ename": TIMEOUT, "evalue": why, "traceback": [f"{TIMEOUT}: {why}"]}
        killers: list[int] = []
        self._slowest, started = (0.0, ""), time.monotonic()
        with tempfile.TemporaryDirectory(prefix="grade-", dir="/tmp" if os.path.isdir("/tmp") else None) as runtime:
            self._runtime = runtime
            while True:
                super().preprocess(nb, resources, km)  # runs the cells through preprocess_cell below
                if self._died_at is None:
                    break
                killers.append(self._died_at)
                if len(killers) > self.kernel_deaths:
                    self._not_run(f"the kernel died {len(killers)} times")
                    break
        for cell in self.nb.cells:
            stderr_kept_visible(cell)
        seconds, name = self._slowest
        log = self.log.warning if self.timeout and seconds > self.timeout / 2 else self.log.info
        log("ran in %.0f s; the slowest cell, %s, took %.1f s (timeout %s s)", time.monotonic() - started, name,
            seconds, self.timeout)
        return self.nb, self.resources

    def _not_run(self, why: str, start: int | None = None) -> None:
        first = self._died_at + 1 if start is None else start
        for cell in self.nb.cells[first:]:
            if cell.cell_type == "code" and cell.source.strip():
                cell.outputs = [_error(NOT_RUN, f"not run: {why}")]

    def reset_execution_trackers(self):
        super().reset_execution_trackers()
        self._died_at = None

    def _get_timeout(self, cell):
        timeout = super()._get_timeout(cell)
        left = max(1, int(self._deadline - time.monotonic()))
        return min(timeout, left) if timeout else left

    async def _async_handle_timeout(self, timeout, cell=None):
        reply = await super()._async_handle_timeout(timeout, cell)
        grade_id = cell.metadata.get("nbgrader", {}).get("grade_id") if cell is not None else None
        if reply and grade_id:  # name the cell, as the feedback and the formgrader show its error
            why = f"{grade_id} gave no reply within {timeout} s: it was interrupted and grading went on"
            reply["content"].update(evalue=why, traceback=[f"{TIMEOUT}: {why}"])
        return reply

    def preprocess_cell(self, cell, resources, index):
        if self._died_at is not None or (cell.get("outputs") and cell.outputs[0].get("ename") == DIED):
            return cell, self.resources  # after a death: skipped now; the cell that killed the kernel: never rerun
        if time.monotonic() > self._deadline and cell.cell_type == "code" and cell.source.strip():
            cell.outputs = [_error(NOT_RUN, f"not run: the submission's {self.submission_timeout} s were spent")]
            return cell, self.resources
        started = time.monotonic()
        try:
            return super().preprocess_cell(cell, resources, index)
        except DeadKernelError:
            self._died_at = index
            process = getattr(getattr(self.km, "provisioner", None), "process", None)
            code = process.poll() if process else None
            how = f" (exit status {code})" if code is not None else ""
            cell.outputs = [_error(DIED, f"the kernel died while running {cell_name(cell, index)}{how}; a new kernel "
                                         "re-ran the cells before it and grading went on after it")]
            self.log.warning("%s killed the kernel%s", cell_name(cell, index), how)
            return cell, self.resources
        finally:
            self._slowest = max(self._slowest, (time.monotonic() - started, cell_name(cell, index)))


def restore_position(released: list, cells: list, grade_id: str) -> int:
    """Where the released notebook's cell ``grade_id`` goes back into ``cells``: right after the nearest cell before
    it in ``released`` that ``cells`` still holds (the same cell id, grade id or source), else first."""
    def key(cell) -> str | None:
        return cell.get("metadata", {}).get("nbgrader", {}).get("grade_id")

    def matches(before) -> list[list[int]]:  # by cell id, by grade id, by source: the first that finds it wins
        return [[i for i, c in enumerate(cells) if before.get("id") and c.get("id") == before.get("id")],
                [i for i, c in enumerate(cells) if key(before) and key(c) == key(before)],
                [i for i, c in enumerate(cells) if before.source.strip() and c.cell_type == before.cell_type
                 and c.source == before.source]]

    at = [key(cell) for cell in released].index(grade_id)
    for before in reversed(released[:at]):
        found = next((found for found in matches(before) if found), None)
        if found:
            return found[-1] + 1
    return 0


class RestoreCells(OverwriteCells):
    """nbgrader's OverwriteCells; a deleted grade cell comes back where it was in the released notebook.

    nbgrader puts it after the nearest nbgrader cell before it, so a test cell would land above an ungraded cell
    it needs (a %%writefile cell between the answer and its test): the right answer would lose its points.
    """

    def add_missing_grade_cells(self, nb, resources):
        from nbgrader.coursedir import CourseDirectory

        coursedir, assignment = CourseDirectory(config=self.config), resources["nbgrader"]["assignment"]
        paths = [Path(coursedir.format_path(folder, ".", assignment)) / f"{resources['nbgrader']['notebook']}.ipynb"
                 for folder in (coursedir.release_directory, coursedir.source_directory)]
        released = next((path for path in paths if path.exists()), None)
        if released is not None:
            import nbformat

            released = nbformat.read(released, as_version=4).cells
            source = self.gradebook.find_notebook(self.notebook_id, self.assignment_id)
            cells = {cell.name: cell for cell in source.source_cells}
            solutions = {cell.name for cell in source.solution_cells}
            order = [cell.get("metadata", {}).get("nbgrader", {}).get("grade_id") for cell in released]
            for grade in sorted(source.grade_cells, key=lambda g: order.index(g.name) if g.name in order else len(order)):
                present = {cell.get("metadata", {}).get("nbgrader", {}).get("grade_id") for cell in nb.cells}
                if grade.name in present or grade.name not in order:
                    continue
                self.log.warning("Missing grade cell %s encountered, adding it back where it was", grade.name)
                cell = nbformat.from_dict(self.missing_cell_transform(cells[grade.name], grade.max_score,
                                                                      is_solution=grade.name in solutions))
                cell_id = released[order.index(grade.name)].get("id")
                if cell_id and cell_id not in {c.get("id") for c in nb.cells}:
                    cell["id"] = cell_id
                nb.cells.insert(restore_position(released, nb.cells, grade.name), cell)
        return super().add_missing_grade_cells(nb, resources)  # what is still missing: nbgrader's own placement


class SaveAutoGrades(_SaveAutoGrades):
    """nbgrader's SaveAutoGrades; an answer cell that timed out or killed the kernel gets that as its comment."""

    def _add_comment(self, cell, resources):
        super()._add_comment(cell, resources)
        why = [o.evalue for o in cell.get("outputs", []) if o.get("ename") in (TIMEOUT, DIED)]
        if why:  # in the gradebook, the Formgrader and the feedback
            comment = self.gradebook.find_comment(cell.metadata.nbgrader.grade_id, self.notebook_id,
                                                  self.assignment_id, self.student_id)
            comment.auto_comment = why[0]
            self.gradebook.db.commit()


class HideHiddenTests(Preprocessor):
    """Feedback without the hidden tests' code: in each test cell the hidden region becomes one comment line, and
    its errors keep their message and the student's own frames but lose every line of hidden code.

    nbgrader's feedback is the autograded notebook as it is, hidden tests included (its source and the code lines
    of the traceback). ``c.HideHiddenTests.enabled = False`` (nbgrader_config.py) shows them again.
    """

    enabled = Bool(True, help="False: the feedback shows the hidden tests' code, as nbgrader's own does.").tag(config=True)
    begin, end = "BEGIN HIDDEN TESTS", "END HIDDEN TESTS"
    note = "### hidden tests: not shown in the feedback"

    def preprocess_cell(self, cell, resources, index):
        meta = cell.metadata.get("nbgrader", {})
        if cell.cell_type != "code" or not meta.get("grade") or meta.get("solution") or self.begin not in cell.source:
            return cell, resources
        shown, hidden, inside = [], set(), False
        for line in cell.source.splitlines():
            if self.begin in line or self.end in line:
                inside = self.begin in line
                shown += [self.note] if inside else []
                hidden.add(line.strip())
            elif inside:
                hidden.add(line.strip())
            else:
                shown.append(line)
        cell.source = "\n".join(shown)
        hidden.discard("")
        for output in cell.get("outputs", []):
            if output.get("output_type") == "error":
                output.traceback = [self._without(entry, hidden) for entry in output.get("traceback", [])]
        return cell, resources

    @staticmethod
    def _without(entry: str, hidden: set[str]) -> str:
        """A traceback entry without its lines of hidden code (`----> 5 assert ...` says the failure is hidden)."""
        kept = []
        for line in entry.split("\n"):
            plain = re.sub(r"\x1b\[[0-9;]*[A-Za-z]", "", line)
            numbered = re.match(r"\s*(-*>)?\s*(\d+)\s(.*)", plain)
            code = (numbered.group(3) if numbered else plain).strip()
            if code and code in hidden:
                if numbered and numbered.group(1):
                    kept.append(f"{numbered.group(1)} {numbered.group(2)} (a hidden test: its code is not shown)")
                continue
            kept.append(line)
        return "\n".join(kept)


def configure(c) -> None:
    """Grading settings of nbgrader_config.py."""
    from nbconvert.preprocessors import ClearMetadataPreprocessor, CSSHTMLHeaderPreprocessor
    from nbgrader.preprocessors import AssignLatePenalties, CheckCellMetadata, GetGrades, IgnorePattern, LimitOutput

    c.Autograde.autograde_preprocessors = [GradingExecute, IgnorePattern, ClearMetadataPreprocessor, LimitOutput,
                                           SaveAutoGrades, AssignLatePenalties, CheckCellMetadata]
    c.OverwriteCells.add_missing_cells = True  # a deleted test cell comes back from the source, hidden tests too
    c.Autograde.sanitize_preprocessors = [  # nbgrader's, with RestoreCells for OverwriteCells
        RestoreCells if pp is OverwriteCells else pp for pp in Autograde.class_traits()["sanitize_preprocessors"].default()]
    c.GenerateFeedback.preprocessors = [GetGrades, CSSHTMLHeaderPreprocessor, HideHiddenTests]  # nbgrader's + ours
    # The learner's Validate button (`nbgrader validate`) judges a graded cell as autograde does, by raising only: its
    # preprocessor list is not configurable, so the two judging functions it calls (nbgrader.utils) see the cell as
    # stderr_kept_visible leaves it (a copy: what the learner is shown keeps its stderr).
    import nbformat
    import nbgrader.utils

    for name in ("determine_grade", "has_failed"):
        judge = getattr(nbgrader.utils, name)
        if not hasattr(judge, "judges_by_raising"):
            def by_raising(cell, *args, _judge=judge, **kwargs):
                return _judge(stderr_kept_visible(nbformat.from_dict(json.loads(json.dumps(cell)))), *args, **kwargs)

            by_raising.judges_by_raising = True
            setattr(nbgrader.utils, name, by_raising)


# ---- the class table -------------------------------------------------------------------------------------------

def incidents(notebook: Path) -> dict[str, list[str]]:
    """Cells of an autograded notebook that timed out, killed the kernel or were not run."""
    import nbformat

    found = {TIMEOUT: [], DIED: [], NOT_RUN: []}
    for index, cell in enumerate(nbformat.read(notebook, as_version=4).cells):
        for output in cell.get("outputs", []):
            if output.get("ename") in found:
                found[output.ename].append(cell_name(cell, index))
    return found


SPEEDUP = re.compile(r"fast_train speed-up over the baseline: ([0-9.]+)x")  # what lesson 09's measurement cell prints


def speedup(notebook: Path) -> float | None:
    """The speed-up an autograded notebook measured and printed (lesson 09), else None: shown beside the score, never graded."""
    import nbformat

    found = [float(m.group(1)) for cell in nbformat.read(notebook, as_version=4).cells for output in cell.get("outputs", [])
             if output.get("output_type") == "stream" for m in SPEEDUP.finditer(output.get("text", ""))]
    return found[-1] if found else None


def table(course: Path, lesson: str, seconds: dict[str, float]) -> list[dict]:
    from nbgrader.api import Gradebook, MissingEntry

    rows = []
    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gb:
        for student in sorted(seconds):
            row = {"student": student, "seconds": seconds[student], "score": None, "max": 0.0, "failed": [],
                   TIMEOUT: [], DIED: [], NOT_RUN: []}
            try:
                submission = gb.find_submission(lesson, student)
            except MissingEntry:
                rows.append(row)
                continue
            row["score"], row["max"], row["by hand"] = 0.0, 0.0, 0.0
            for notebook in submission.notebooks:
                for grade in notebook.grades:
                    row["max"] += grade.max_score
                    if grade.needs_manual_grade:
                        row["by hand"] += grade.max_score  # a written answer, for the instructor
                        continue
                    row["score"] += grade.score or 0
                    if (grade.score or 0) < grade.max_score:
                        row["failed"].append(grade.name)
                graded = course / "autograded" / student / lesson / f"{notebook.name}.ipynb"
                if graded.exists():
                    for kind, cells in incidents(graded).items():
                        row[kind] += cells
                    row["speed-up"] = speedup(graded)
            rows.append(row)
    return rows


def show(rows: list[dict]) -> str:
    timed = any(r.get("speed-up") for r in rows)  # lesson 09: the class ranked by the speed-up each measured here
    if timed:
        rows = sorted(rows, key=lambda r: -(r.get("speed-up") or 0.0))
    lines = [f"{'student':<16} {'score':>24} {'seconds':>7}" + (f" {'speed-up':>8}" if timed else "")
             + "  failed cells | timeouts | kernel deaths | not run"]
    for r in rows:
        score = "not graded" if r["score"] is None else f"{r['score']:g} / {r['max']:g}"
        score += f" (+{r['by hand']:g} by hand)" if r.get("by hand") else ""
        cells = " | ".join(", ".join(r[k]) or "-" for k in ("failed", TIMEOUT, DIED, NOT_RUN))
        ratio = (f" {r['speed-up']:>7.2f}x" if r.get("speed-up") else f" {'-':>8}") if timed else ""
        lines.append(f"{r['student']:<16} {score:>24} {r['seconds']:>7.0f}{ratio}  {cells}")
    return "\n".join(lines)


def _nbgrader(course: Path, *args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PATH=os.pathsep.join([os.path.dirname(sys.executable), os.environ.get("PATH", "")]))
    return subprocess.run([sys.executable, "-m", "nbgrader", *args, "--log-level=WARN"], cwd=course, env=env,
                          capture_output=True, text=True, stdin=subprocess.DEVNULL)


def grade(course: Path, lesson: str, *, jobs: int, extra: list[str]) -> list[dict]:
    """Autograde every submission of ``lesson`` in ``course``, ``jobs`` at a time; the table's rows."""
    students = sorted(p.parent.name for p in (course / "submitted").glob(f"*/{lesson}") if p.is_dir())

    def one(student: str) -> tuple[str, float]:
        started = time.monotonic()
        for _ in range(3):  # two nbgraders writing the gradebook at once: sqlite says "database is locked"
            result = _nbgrader(course, "autograde", lesson, "--student", student, "--force", *extra)
            if "database is locked" not in result.stderr:
                break
        if result.returncode != 0:
            print(f"{student}: nbgrader autograde failed:\n{result.stderr[-2000:]}", file=sys.stderr)
        return student, time.monotonic() - started

    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        seconds = dict(pool.map(one, students))
    times = grading_times(course)  # kept for the class report (tools/report.py)
    times[lesson] = {**times.get(lesson, {}), **{student: round(s, 1) for student, s in seconds.items()}}
    (course / REPORTS).mkdir(exist_ok=True)
    (course / REPORTS / TIMES).write_text(json.dumps(times, indent=1, sort_keys=True) + "\n")
    return table(course, lesson, seconds)


REPORTS, TIMES = "reports", "grading-times.json"  # the class reports' folder; the grading times it keeps


def grading_times(course: Path) -> dict[str, dict[str, float]]:
    """lesson -> student -> seconds grade() took for the submission, as its last run for them measured."""
    path = course / REPORTS / TIMES
    return json.loads(path.read_text()) if path.exists() else {}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("lesson", help="the assignment, e.g. 02_tensors_on_device")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="submissions graded at once (default: cores)")
    parser.add_argument("--course", type=Path, default=Path.cwd(), help="the course directory (default: here)")
    parser.add_argument("--unsandboxed", action="store_true", help="grade without the sandbox (trusted code only)")
    parser.add_argument("--no-collect", action="store_true", help="grade what is in submitted/ without collecting")
    args, extra = parser.parse_known_args(argv)
    if not (args.course / "nbgrader_config.py").exists():
        parser.error(f"{args.course} is not the course directory (no nbgrader_config.py)")
    problem = None if args.unsandboxed else sandbox_problem()
    if problem:
        print(f"grade: refusing to grade {args.lesson}: {problem}.\n{WHY}", file=sys.stderr)
        return 2
    if args.unsandboxed:
        extra.append(UNSANDBOXED)
    if not args.no_collect:
        collected = _nbgrader(args.course, "collect", args.lesson)
        if collected.returncode != 0:
            print(f"(nothing collected: {collected.stderr.strip().splitlines()[-1:] or 'no exchange'}; "
                  "grading what is in submitted/)", file=sys.stderr)
    started = time.monotonic()
    rows = grade(args.course, args.lesson, jobs=args.jobs, extra=extra)
    print(show(rows))
    print(f"{len(rows)} submissions in {time.monotonic() - started:.0f} s, {args.jobs} at a time")
    return 0 if rows and all(r["score"] is not None for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
