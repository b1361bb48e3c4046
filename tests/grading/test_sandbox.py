"""The grader a class can be trusted with (`make grade`, coursetools.grading), on a scratch course.

The course is the real nbgrader_config.py with a small assignment of three exercises (so a run takes
seconds, not a lesson's minutes), generated once for this module's tests (each grades a copy). Three
students are graded by one `make grade` run, two at a time:

    snoop    an untouched notebook whose first answer reads solutions/, the gradebook and
             `deleted`'s submission, runs the solution's cells it found, and opens a socket to a
             server this test started
    deleted  every answer right, the test cell of exercise 1 deleted
    broken   exercise 2 calls os._exit (the kernel dies), exercise 3 loops forever

The snooper graded once more without the sandbox shows the test bites: there it reaches the server
and scores the point of the exercise its code sits in, with the answer it ran from solutions/.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import sys
import threading
from pathlib import Path

import coursekit as ck
import nbformat
import pytest
from coursetools.grading.rows import class_rows
from coursetools.grading.sandbox import UNSANDBOXED, sandbox_command, sandbox_problem
from coursetools.grading.table import show

# CI installs what these need (.ci/run): a skip there fails
pytestmark = pytest.mark.ci_required
ASSIGNMENT, NAME, EXERCISES = ck.SANDBOX_ASSIGNMENT, ck.SANDBOX_NAME, ck.SANDBOX_EXERCISES
CELL_TIMEOUT, BOUND = 8, 60
SANDBOX = sandbox_problem()
needs_sandbox = pytest.mark.skipif(
    SANDBOX is not None, reason=f"{SANDBOX} (.ci/run installs bubblewrap)"
)


SNOOP = """import glob, json, socket
found = {{}}
for what, pattern in {targets!r}.items():
    try:
        paths = [open(path, "rb").read()[:1] and path for path in glob.glob(pattern)]
        found[what] = paths or "nothing there"
    except OSError as error:
        found[what] = repr(error)
for path in glob.glob({solution!r}):  # the answers, if they can be read
    for cell in json.load(open(path))["cells"]:
        if cell["cell_type"] == "code" and "BEGIN SOLUTION" in "".join(cell["source"]):
            exec("".join(cell["source"]))
try:
    socket.create_connection(("127.0.0.1", {port}), timeout=3).sendall(b"answers please")
    found["server"] = "reached"
except OSError as error:
    found["server"] = repr(error)
print("SNOOP", json.dumps(found))"""


class Server:
    """A TCP server on the host's loopback that counts who reaches it."""

    def __init__(self):
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port, self.reached = self.sock.getsockname()[1], 0
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self):
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.reached += 1
            conn.close()


def _submissions(course, port) -> dict[str, nbformat.NotebookNode]:
    student = ck.read(course / "release" / ASSIGNMENT / NAME)
    right = {name: f"def {name}(x):\n    return {body}" for name, (body, _, _) in EXERCISES.items()}
    snoop = SNOOP.format(
        port=port,
        solution=str(course / "source" / ASSIGNMENT / "*.ipynb"),
        targets={
            "solutions": str(course / "source" / "*" / "*.ipynb"),
            "gradebook": str(course / "gradebook.db"),
            "others": str(course / "submitted" / "deleted" / "*" / "*.ipynb"),
        },
    )
    # broken: the kernel dies at exercise 2, so a new kernel re-runs exercise 1 and its test; then
    # exercise 3 loops (after the death, so it costs one cell's timeout once)
    broken = {**right, "square": "import os\nos._exit(3)", "negate": "while True:\n    pass"}
    out = {
        "snoop": ck.submission_from(student, {"double": snoop}),
        "deleted": ck.submission_from(student, right),
        "broken": ck.submission_from(student, broken),
    }
    out["deleted"].cells = [
        c
        for c in out["deleted"].cells
        if c.metadata.get("nbgrader", {}).get("grade_id") != "test_double"
    ]
    return out


def _grade(course, *extra) -> subprocess.CompletedProcess:
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "coursetools.grading",
            ASSIGNMENT,
            "--course",
            str(course),
            "--no-collect",
            "--jobs",
            "2",
            f"--Execute.timeout={CELL_TIMEOUT}",
            f"--GradingExecute.submission_timeout={BOUND}",
            *extra,
        ],
        env=ck.env(),
        capture_output=True,
        text=True,
    )


def _snooped(course, student="snoop") -> dict:
    nb = ck.read(course / "autograded" / student / ASSIGNMENT / NAME)
    text = "".join(o.get("text", "") for cell in nb.cells for o in cell.get("outputs", []))
    return json.loads(re.search(r"SNOOP (.*)", text).group(1))


@pytest.fixture(scope="module")
def generated(tmp_path_factory) -> Path:
    """The small assignment's scratch course, generated once: each test grades its own copy."""
    return ck.sandbox_course(tmp_path_factory.mktemp("sandbox"))


def _copy(generated: Path, tmp_path: Path) -> Path:
    return shutil.copytree(generated, tmp_path / "course")


@pytest.mark.slow
@needs_sandbox
def test_class_in_sandbox(generated, tmp_path):
    """Three students graded in the sandbox: each scores what its own code earns, nothing leaks."""
    course, server = _copy(generated, tmp_path), Server()
    for name, nb in _submissions(course, server.port).items():
        ck.submit_as(course, name, ASSIGNMENT, NAME, nb)
    result = _grade(course)
    assert result.returncode == 0, result.stdout + result.stderr
    print(result.stdout)
    data = class_rows(course, ASSIGNMENT)
    assert show(data) in result.stdout, "the table printed is the class's rows"
    rows = {row.student: row for row in data.rows}
    scores = {
        name: {g: s for g, (s, _, _) in ck.scores_of(course, ASSIGNMENT, NAME, name).items()}
        for name in rows
    }

    # A deleted test cell comes back from the source (hidden tests included) and the right answers
    # keep their points.
    assert scores["deleted"] == {"test_double": 1, "test_square": 1, "test_negate": 1}
    # The snooper found nothing of the course and no server, so it scores what its own answers earn:
    # nothing.
    found = _snooped(course)
    assert found == {
        "solutions": "nothing there",
        "gradebook": "nothing there",
        "others": "nothing there",
        "server": found["server"],
    }, found
    assert found["server"] != "reached" and server.reached == 0
    assert scores["snoop"] == {"test_double": 0, "test_square": 0, "test_negate": 0}
    # A dead kernel costs its own exercise: the cell that killed it is named, a new kernel re-ran
    # the cells before it (exercise 1 keeps its point), grading went on. An endless loop costs its
    # own exercise and one cell's timeout.
    assert scores["broken"] == {"test_double": 1, "test_square": 0, "test_negate": 0}
    assert (rows["broken"].failed, rows["broken"].timed_out, rows["broken"].kernel_died) == (
        ["test_square", "test_negate"],
        ["negate"],
        ["square"],
    )
    assert rows["broken"].seconds < 2 * BOUND, (
        "an endless loop ends within the bound (a busy machine's slack)"
    )
    graded = ck.read(course / "autograded" / "broken" / ASSIGNMENT / NAME)
    assert f"negate gave no reply within {CELL_TIMEOUT} s" in str(graded.cells[5].outputs), (
        "the feedback names it"
    )
    from nbgrader.api import Gradebook

    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gb:
        comment = gb.find_comment(
            "square", NAME.removesuffix(".ipynb"), ASSIGNMENT, "broken"
        ).auto_comment
    assert comment.startswith("the kernel died while running square"), comment
    ck.nbgrader(course, "generate_feedback", ASSIGNMENT, "--student=broken", "--force")
    html = (
        course / "feedback" / "broken" / ASSIGNMENT / NAME.replace(".ipynb", ".html")
    ).read_text()
    assert "KernelDied" in html and "the kernel died while running square (exit status 3)" in html

    # The same snooper without the sandbox: it reads the answers and reaches the server. The test
    # above bites.
    for name in ("deleted", "broken"):
        shutil.rmtree(course / "submitted" / name)
    result = _grade(course, "--unsandboxed")
    assert result.returncode == 0, result.stdout + result.stderr
    assert _snooped(course)["server"] == "reached" and server.reached == 1
    assert ck.scores_of(course, ASSIGNMENT, NAME, "snoop")["test_double"][0] == 1, (
        "the answer it ran from solutions/"
    )


@pytest.mark.slow
def test_refuses_without_sandbox(generated, tmp_path):
    """Without bubblewrap, `make grade` and a plain `nbgrader autograde` refuse and say why."""
    course = _copy(generated, tmp_path)
    ck.submit_as(course, "right", ASSIGNMENT, NAME, ck.read(course / "release" / ASSIGNMENT / NAME))
    env = dict(ck.env(), PATH=os.path.dirname(sys.executable))  # no bwrap on PATH
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "coursetools.grading",
            ASSIGNMENT,
            "--course",
            str(course),
            "--no-collect",
        ],
        env=env,
        capture_output=True,
        text=True,
    )
    assert (
        result.returncode == 2 and "the sandbox tool `bwrap` is not installed" in result.stderr
    ), result.stderr
    assert "apt-get install bubblewrap" in result.stderr and UNSANDBOXED in result.stderr
    # plain `nbgrader autograde` refuses too: the submission is not graded
    result = subprocess.run(
        [sys.executable, "-m", "nbgrader", "autograde", ASSIGNMENT],
        cwd=course,
        env=env,
        capture_output=True,
        text=True,
    )
    assert (
        "autograde refuses to run: the sandbox tool `bwrap` is not installed"
        in result.stdout + result.stderr
    )
    assert result.returncode != 0


def test_sandbox_command():
    """The command line, for a GPU machine (fake device files) with the course at /srv/course."""
    cmd = sandbox_command(
        [
            "/srv/course/.venv/bin/python",
            "-m",
            "ipykernel_launcher",
            "-f",
            "/tmp/grade-1/kernel.json",
        ],
        workdir="/srv/course/autograded/ann/02_x",
        runtime="/tmp/grade-1",
        memory=0,
        cpu_seconds=900,
        python_dirs=["/srv/course/.venv", "/usr/lib/python3.11"],
        devices=["/dev/nvidia0", "/dev/nvidiactl"],
        environ={
            "NBGRADER_EXECUTION": "autograde",
            "GPUCOURSE_DATA": "/srv/data",
            "AWS_SECRET_ACCESS_KEY": "x",
            "CUDA_VISIBLE_DEVICES": "0",
        },
        course="/srv/course",
    )
    joined = " ".join(cmd)
    assert cmd[:3] == ["prlimit", "--cpu=900", "--core=0"] and "--as=" not in joined, (
        "no address-space limit with GPUs"
    )
    assert "--unshare-all" in cmd and "--share-net" not in cmd and "--die-with-parent" in cmd
    assert (
        "--dev-bind /dev/nvidia0 /dev/nvidia0" in joined
        and "--dev-bind /dev/nvidiactl /dev/nvidiactl" in joined
    )
    assert "--bind /srv/course/autograded/ann/02_x /srv/course/autograded/ann/02_x" in joined
    assert "--ro-bind /srv/course/.venv /srv/course/.venv" in joined
    assert not re.search(r"bind \S*/srv/course /", joined), (
        "the course folder itself is never mounted"
    )
    assert (
        "--setenv NBGRADER_EXECUTION autograde" in joined
        and "--setenv CUDA_VISIBLE_DEVICES 0" in joined
    )
    assert "AWS" not in joined and "/srv/data" not in joined and "--clearenv" in cmd
    with pytest.raises(RuntimeError, match="holds the course"):
        sandbox_command(
            ["python"],
            workdir="/w",
            runtime="/r",
            memory=1,
            cpu_seconds=1,
            python_dirs=["/srv"],
            devices=[],
            environ={},
            course="/srv/course",
        )
