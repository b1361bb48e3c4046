"""gpucourse.launch: torchrun from a notebook, with a timeout, each rank's output (from the files
torchrun writes for it), clear failures and no orphans.

The launches use tiny scripts that do not import torch (only torchrun's agent does, and the crash
for its ``@record``), so each takes a few seconds.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from gpucourse import launch

linux_only = pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason="reads /proc to find leftover processes"
)

RANKS = """
import os
print(f"hello from rank {os.environ['RANK']} of {os.environ['WORLD_SIZE']}", flush=True)
"""
CRASH = """
import os, time
from torch.distributed.elastic.multiprocessing.errors import record

@record  # its exception goes to torchrun's error.json for this rank
def main():
    rank = int(os.environ["RANK"])
    print(f"rank {rank} up", flush=True)
    if rank == 1:
        raise RuntimeError("rank 1 gives up on purpose")
    time.sleep(120)  # rank 0 would wait for rank 1 forever

main()
"""
NOISY = (
    RANKS
    + """
import sys, time
print("UserWarning: something a framework says", file=sys.stderr, flush=True)
sys.stdout.write("one line, ")  # torchrun reads the file meanwhile: it sees half a line
sys.stdout.flush()
time.sleep(0.5)
print("written in two writes", flush=True)
"""
)
BAD_ARGUMENT = """
import argparse
parser = argparse.ArgumentParser()
parser.add_argument("--epochs", type=int, default=1)
parser.parse_args()
"""
SILENT = """
import os, signal
# dies before printing anything, as the kernel's out-of-memory killer would make it
os.kill(os.getpid(), signal.SIGKILL)
"""
HANG = """
import os, pathlib, signal, sys, time
if os.environ["RANK"] == "1":
    # a rank that SIGTERM cannot stop: torchrun must SIGKILL it
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
pathlib.Path(sys.argv[1], os.environ["RANK"]).write_text(str(os.getpid()))
print("sleeping", flush=True)
time.sleep(600)
"""


def write(tmp_path: Path, name: str, source: str) -> Path:
    path = tmp_path / name
    path.write_text(source)
    return path


def test_syntax_error_is_reported_with_its_line(tmp_path):
    script = write(tmp_path, "broken.py", "import os\n\ndef main(:\n    pass\n")
    with pytest.raises(
        launch.LaunchError, match=r"broken.py has a syntax error \(line 3.*\n    def main\(:"
    ):
        launch.torchrun(script, timeout=30)


def test_missing_script(tmp_path):
    with pytest.raises(launch.LaunchError, match="does not exist"):
        launch.torchrun(tmp_path / "nowhere.py")


@pytest.mark.parametrize(
    "kwargs,match",
    [
        ({"nproc_per_node": 0}, "nproc_per_node must be"),
        ({"nproc_per_node": "2"}, "nproc_per_node must be"),
        ({"nnodes": 0}, "nnodes must be"),
        ({"timeout": 0}, "timeout must be"),
    ],
)
def test_bad_arguments(tmp_path, kwargs, match):
    with pytest.raises(launch.LaunchError, match=match):
        launch.torchrun(write(tmp_path, "ranks.py", RANKS), **kwargs)


# torchrun's report when a rank fails (torch 2.14; 2.11 lacks the signal's name)
REPORT = """Traceback (most recent call last):
torch.distributed.elastic.multiprocessing.errors.ChildFailedError:
============================================================
Failures:
[1]:
  rank      : 0 (local_rank: 0)
  exitcode  : -15 (pid: 12)  (SIGTERM)
Root Cause (first observed failure):
[0]:
  rank      : 3 (local_rank: 1)
  exitcode  : 1 (pid: 13)
============================================================"""


def test_failure_message_names_the_root_cause():
    result = launch.LaunchResult(
        "torchrun x.py",
        returncode=1,
        ranks={0: ["fine"], 3: ["step 1", "ValueError: boom"]},
        console=REPORT.splitlines(),
    )
    message = launch._why(result, timeout=60)
    assert message.startswith("rank 3 failed first (exit code 1: an uncaught exception"), message
    assert message.endswith("Last lines of rank 3:\n    step 1\n    ValueError: boom"), message
    assert "ChildFailedError" not in message, "torchrun's own traceback is not the rank's output"


class FakeAgent:
    """A torchrun agent that has run: it wrote each of its ranks' files under its --log-dir as
    torchrun does (``<dir>/<run id>_<random>/attempt_0/<local rank>/``), printed ``console``,
    and exited with ``code``."""

    files: dict[int, dict[str, str]] = {}  # local rank -> file name -> text
    console: list[str] = []
    code = 0

    def __init__(self, argv, **_):
        (log_dir,) = [a.split("=", 1)[1] for a in argv if a.startswith("--log-dir=")]
        for rank, files in self.files.items():
            folder = Path(log_dir, "c6f3_x1y2", "attempt_0", str(rank))
            folder.mkdir(parents=True)
            for name, text in files.items():
                (folder / name).write_text(text)
        self.stdout, self.stderr, self.pid = iter(self.console), iter([]), 0

    def poll(self):
        return self.code

    wait = poll

    def terminate(self):
        pass


def fake_launch(monkeypatch, tmp_path, files, console, code=0, **kwargs):
    agent = type("Agent", (FakeAgent,), {"files": files, "console": console, "code": code})
    monkeypatch.setattr(launch.subprocess, "Popen", agent)
    return launch.torchrun(write(tmp_path, "ranks.py", RANKS), nproc_per_node=2, **kwargs)


def test_each_rank_output_is_read_from_its_files(monkeypatch, tmp_path, capsys):
    """A rank's lines are its stdout's, then its stderr's, from its own files; the console is only
    shown, and however torchrun cut and interleaved it there, nothing of it gets into a rank's
    lines."""
    files = {
        0: {"stdout.log": "image batches copied: 4\nepoch 0\n", "stderr.log": "UserWarning: x\n"},
        1: {"stdout.log": "epoch 1: 0.52\ncut short, no end", "stderr.log": ""},
    }
    console = [  # torchrun read both ranks' lines in pieces
        "[rank0]: image batches [rank1]: epoch 1: 0.52\n",
        "[rank0]: copied: 4[rank0]: \n",
        "torchrun's own line\n",
        "[rank1]: cut short, no end",
    ]
    result = fake_launch(monkeypatch, tmp_path, files, console, timeout=30)
    assert result.output(0) == ["image batches copied: 4", "epoch 0", "UserWarning: x"]
    assert result.output(1) == ["epoch 1: 0.52", "cut short, no end"]
    assert result.output(2) == [], "no such rank: no lines"
    printed = capsys.readouterr().out
    assert "[rank1]: cut short, no end" in printed and "torchrun's own line" not in printed


def test_a_failing_rank_is_named_with_its_cause_from_error_json(monkeypatch, tmp_path):
    """A script whose entry point has ``@record`` leaves its exception in error.json (torchrun's
    format); the message names it, then the rank's last lines from its files."""
    error = {
        "message": {
            "message": "RuntimeError: rank 1 ran out of luck",
            "extraInfo": {
                "py_callstack": "Traceback (most recent call last): ...",
                "timestamp": "1",
            },
        }
    }
    files = {
        0: {"stdout.log": "rank 0 is fine\n"},
        1: {
            "stdout.log": "rank 1 up\n",
            "stderr.log": "Traceback (most recent call last):\n"
            "RuntimeError: rank 1 ran out of luck\n[W] ProcessGroup destroyed\n",
            "error.json": json.dumps(error),
        },
    }
    report = REPORT.replace("rank      : 3 (local_rank: 1)", "rank      : 1 (local_rank: 1)")
    with pytest.raises(launch.LaunchError) as info:
        fake_launch(monkeypatch, tmp_path, files, report.splitlines(), code=1, timeout=30)
    assert str(info.value).splitlines() == [
        "rank 1 failed first (exit code 1: an uncaught exception, or sys.exit with a message); "
        f"torchrun stopped the others: {info.value.result.command}",
        "Root cause: RuntimeError: rank 1 ran out of luck",
        "Last lines of rank 1:",
        "    rank 1 up",
        "    Traceback (most recent call last):",
        "    RuntimeError: rank 1 ran out of luck",
        "    [W] ProcessGroup destroyed",
    ]
    assert info.value.result.errors == {1: "RuntimeError: rank 1 ran out of luck"}


# The options of torchrun in torch 2.11.0, the oldest the course supports (torch/distributed/run.py,
# get_args_parser)
TORCH_2_11_OPTIONS = {
    "--nnodes",
    "--nproc-per-node",
    "--rdzv-backend",
    "--rdzv-endpoint",
    "--rdzv-id",
    "--rdzv-conf",
    "--standalone",
    "--max-restarts",
    "--monitor-interval",
    "--start-method",
    "--event-log-handler",
    "--role",
    "--module",
    "--no-python",
    "--run-path",
    "--log-dir",
    "--redirects",
    "--tee",
    "--local-ranks-filter",
    "--duplicate-stdout-filters",
    "--duplicate-stderr-filters",
    "--node-rank",
    "--master-addr",
    "--master-port",
    "--local-addr",
    "--logs-specs",
    "--numa-binding",
    "--signals-to-handle",
    "--virtual-local-rank",
}


@linux_only
def test_children_finds_a_process_in_a_session_of_its_own():
    """How a timeout finds the workers of an agent that outlives its grace (torch 2.11's waits 30
    s on a stuck one)."""
    child = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(30)"], start_new_session=True
    )
    try:
        assert child.pid in launch._children(os.getpid())
    finally:
        child.kill()
        child.wait()
    assert launch._children(2**22 + 1) == [], "no such process: none"


@pytest.mark.parametrize("nnodes", [1, 2])
def test_torchrun_gets_only_options_every_supported_torch_knows(tmp_path, monkeypatch, nnodes):
    """The rank prefix goes through the environment (torch 2.11 reads it too), not an option
    torch 2.11 lacks."""
    calls = []

    class Agent(FakeAgent):  # a torchrun that ends at once, successfully
        def __init__(self, argv, env, **kwargs):
            calls.append((argv, env))
            super().__init__(argv, **kwargs)

    monkeypatch.setattr(launch.subprocess, "Popen", Agent)
    script = write(tmp_path, "ranks.py", RANKS)
    result = launch.torchrun(script, "--epochs", "1", nproc_per_node=1, nnodes=nnodes, timeout=30)
    if nnodes == 1:
        assert result.command == f"torchrun --standalone --nproc-per-node=1 {script} --epochs 1", (
            "what a learner would type"
        )
    else:
        assert result.command.endswith(f"{script} --epochs 1  (x2 agents)"), result.command
    for argv, env in calls:
        options = argv[
            argv.index("torch.distributed.run") + 1 : argv.index(str(tmp_path / "ranks.py"))
        ]
        assert {option.split("=")[0] for option in options} <= TORCH_2_11_OPTIONS, options
        assert env["TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE"] == "[rank${rank}]: "


@pytest.mark.slow
@linux_only
def test_a_crashing_rank_is_named_and_nothing_is_left(tmp_path, monkeypatch):
    monkeypatch.setenv("GPUCOURSE_TEST_TAG", str(tmp_path))  # the launched processes inherit it
    with pytest.raises(launch.LaunchError) as info:
        launch.torchrun(
            write(tmp_path, "crash.py", CRASH), nproc_per_node=2, timeout=60, stream=False
        )
    message = str(info.value)
    assert (
        message.startswith("rank 1 failed first (exit code 1: ")
        and "torchrun stopped the others" in message
    ), message
    assert "\nRoot cause: RuntimeError: rank 1 gives up on purpose\nLast lines of rank 1:\n" in (
        message
    ), "torchrun's error.json, from @record, names the exception"
    assert message.endswith("    RuntimeError: rank 1 gives up on purpose"), (
        "the failed rank's last lines are in the message"
    )
    assert info.value.result.seconds < 30, (
        "a failed rank ends the launch; nobody waits for the timeout"
    )
    assert not _tagged(str(tmp_path))


@pytest.mark.slow
def test_a_rank_that_dies_at_once_is_named_with_its_cause(tmp_path):
    """A bad argument: the rank exits 2 at once, its only lines on stderr; the message gives the
    code's meaning and them."""
    with pytest.raises(launch.LaunchError) as info:
        launch.torchrun(
            write(tmp_path, "train.py", BAD_ARGUMENT),
            "--epochs",
            "x",
            nproc_per_node=1,
            timeout=60,
            stream=False,
        )
    message = str(info.value)
    assert message.startswith("rank 0 failed first (exit code 2: a command-line usage error"), (
        message
    )
    assert message.endswith("error: argument --epochs: invalid int value: 'x'"), message


@pytest.mark.slow
def test_a_rank_that_dies_without_a_word_is_named_with_its_signal(tmp_path):
    with pytest.raises(launch.LaunchError) as info:
        launch.torchrun(
            write(tmp_path, "silent.py", SILENT), nproc_per_node=1, timeout=60, stream=False
        )
    message = str(info.value)
    assert message.startswith("rank 0 failed first (killed by signal 9: SIGKILL: out of memory"), (
        message
    )
    assert message.endswith("Last lines of rank 0:\n    (rank 0 printed nothing)"), message


@pytest.mark.slow
def test_torchrun_rejecting_its_own_arguments_is_named(tmp_path, monkeypatch):
    # torchrun reads its --max-restarts from there, and rejects it
    monkeypatch.setenv("PET_MAX_RESTARTS", "abc")
    with pytest.raises(launch.LaunchError) as info:
        launch.torchrun(
            write(tmp_path, "ranks.py", RANKS), nproc_per_node=1, timeout=60, stream=False
        )
    message = str(info.value)
    assert (
        "failed (exit code 2: a command-line usage error" in message
        and "before any rank" in message
    ), message
    assert "invalid int value: 'abc'" in message, message


class StartedClock:
    """launch's clock: time.monotonic, until every rank has written its pid, then jumps `ahead`: the
    timeout fires with every process certainly running, without waiting it out."""

    def __init__(self, pids: Path, nproc: int, ahead: float):
        self.pids, self.nproc, self.ahead = pids, nproc, ahead
        self.offset, self.jumped_at = 0.0, None

    def monotonic(self) -> float:
        if self.jumped_at is None and len(list(self.pids.iterdir())) == self.nproc:
            self.offset, self.jumped_at = self.ahead, time.monotonic()
        return time.monotonic() + self.offset

    sleep = staticmethod(time.sleep)


@pytest.mark.slow
@linux_only
def test_timeout_stops_every_process(tmp_path, monkeypatch):
    pids = tmp_path / "pids"
    pids.mkdir()
    script = write(tmp_path, "hang.py", HANG)
    monkeypatch.setenv("GPUCOURSE_TEST_TAG", str(tmp_path))
    clock = StartedClock(pids, nproc=2, ahead=60)  # a busy machine starts them within 60 s
    monkeypatch.setattr(launch, "time", clock)
    with pytest.raises(launch.LaunchError, match="did not finish within 60 s") as info:
        launch.torchrun(script, pids, nproc_per_node=2, timeout=60, stream=False)
    assert info.value.result.timed_out and info.value.result.returncode != 0, (
        "the stopped agents report a failure too"
    )
    assert clock.jumped_at is not None and sorted(p.name for p in pids.iterdir()) == ["0", "1"]
    assert time.monotonic() - clock.jumped_at < 15, "stopped soon after the timeout"
    for path in pids.iterdir():  # the workers that had started: their own sessions, yet stopped too
        assert not _alive(int(path.read_text())), f"rank {path.name} outlived the timeout"
    assert not _tagged(str(tmp_path)), "no orphaned process"


@pytest.mark.slow
def test_two_local_agents_meet_at_a_rendezvous_and_each_rank_output_is_prefixed(tmp_path, capsys):
    """Two agents, one worker each, ranks 0 and 1 of 2: each rank's lines, stderr's too, come from
    its own files under its global rank, whole however torchrun read them; the console shows them
    with their prefix."""
    result = launch.torchrun(
        write(tmp_path, "ranks.py", NOISY), nproc_per_node=1, nnodes=2, timeout=60
    )
    assert sorted(result.ranks) == [0, 1] and "x2 agents" in result.command
    for rank in (0, 1):
        assert result.output(rank) == [
            f"hello from rank {rank} of 2",
            "one line, written in two writes",
            "UserWarning: something a framework says",
        ], (
            "stderr is a rank's output too: a check of what rank 0 printed must pick its own lines "
            "(lesson 06 does); a line torchrun read in two pieces is one line"
        )
    printed = capsys.readouterr().out
    assert (
        "[rank0]: hello from rank 0 of 2" in printed
        and "[rank1]: hello from rank 1 of 2" in printed
    )


def _tagged(tag: str) -> set[int]:
    """Processes (not zombies) whose environment carries GPUCOURSE_TEST_TAG=tag."""
    needle = f"GPUCOURSE_TEST_TAG={tag}".encode()
    found = set()
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                if needle in Path(entry.path, "environ").read_bytes().split(b"\0") and _alive(
                    int(entry.name)
                ):
                    found.add(int(entry.name))
            except OSError:
                pass
    return found


def _alive(pid: int) -> bool:
    """True for a live process; a zombie (exited, waiting for its parent to read its exit code)
    is dead."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def test_each_rank_gets_a_share_of_the_cores_this_process_may_use(monkeypatch):
    """A container with 4 CPUs on a 64-core host (a CPU quota, an affinity mask): 2 threads a rank
    of 2, not the 32 the host's core count gives; an OMP_NUM_THREADS already set wins."""
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.setattr(os, "cpu_count", lambda: 64)
    monkeypatch.setattr(launch, "available_cores", lambda: 4)
    assert launch._environment(2)["OMP_NUM_THREADS"] == "2"
    assert launch._environment(8)["OMP_NUM_THREADS"] == "1"  # never 0
    monkeypatch.setenv("OMP_NUM_THREADS", "3")
    assert launch._environment(2)["OMP_NUM_THREADS"] == "3"
