"""gpucourse.launch: torchrun from a notebook, with a timeout, each rank's output, clear failures and no orphans.

The launches use tiny scripts that do not import torch (only torchrun's agent does), so each takes a few seconds.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import pytest

from gpucourse import launch

linux_only = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc to find leftover processes")

RANKS = """
import os
print(f"hello from rank {os.environ['RANK']} of {os.environ['WORLD_SIZE']}", flush=True)
"""
CRASH = """
import os, sys, time
rank = int(os.environ["RANK"])
print(f"rank {rank} up", flush=True)
if rank == 1:
    sys.exit("rank 1 gives up on purpose")
time.sleep(120)  # rank 0 would wait for rank 1 forever
"""
NOISY = RANKS + """
import sys
print("UserWarning: something a framework says", file=sys.stderr, flush=True)
"""
HANG = """
import os, pathlib, signal, sys, time
if os.environ["RANK"] == "1":
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # a rank that SIGTERM cannot stop: torchrun must SIGKILL it
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
    with pytest.raises(launch.LaunchError, match=r"broken.py has a syntax error \(line 3.*\n    def main\(:"):
        launch.torchrun(script, timeout=30)


def test_missing_script(tmp_path):
    with pytest.raises(launch.LaunchError, match="does not exist"):
        launch.torchrun(tmp_path / "nowhere.py")


@pytest.mark.parametrize("kwargs,match", [
    ({"nproc_per_node": 0}, "nproc_per_node must be"),
    ({"nproc_per_node": "2"}, "nproc_per_node must be"),
    ({"nnodes": 0}, "nnodes must be"),
    ({"timeout": 0}, "timeout must be"),
])
def test_bad_arguments(tmp_path, kwargs, match):
    with pytest.raises(launch.LaunchError, match=match):
        launch.torchrun(write(tmp_path, "ranks.py", RANKS), **kwargs)


def test_failure_message_names_the_root_cause():
    report = """Failures:
[1]:
  rank      : 0 (local_rank: 0)
  exitcode  : -15 (pid: 12)  (SIGTERM)
Root Cause (first observed failure):
[0]:
  rank      : 3 (local_rank: 1)
  exitcode  : 1 (pid: 13)
"""
    result = launch.LaunchResult("torchrun x.py", returncode=1,
                                 lines=[("rank3", "ValueError: boom")] + [("agent0", t) for t in report.splitlines()])
    message = launch._why(result, timeout=60)
    assert message.startswith("rank 3 failed first (exit code 1)") and message.endswith("    ValueError: boom")


@pytest.mark.slow
def test_each_rank_output_is_prefixed_and_collected(tmp_path, capsys):
    script = write(tmp_path, "ranks.py", NOISY)
    result = launch.torchrun(script, nproc_per_node=2, timeout=60)
    assert ranks(result) == [0, 1]
    assert result.command == f"torchrun --standalone --nproc-per-node=2 {script}", "what a learner would type"
    assert sorted(result.output(1)) == ["UserWarning: something a framework says", "hello from rank 1 of 2"], \
        "stderr is a rank's output too: a check of what rank 0 printed must pick its own lines (lesson 06 does)"
    printed = capsys.readouterr().out
    assert "[rank0]: hello from rank 0 of 2" in printed and "[rank1]: hello from rank 1 of 2" in printed


@pytest.mark.slow
@linux_only
def test_a_crashing_rank_is_named_and_nothing_is_left(tmp_path, monkeypatch):
    monkeypatch.setenv("GPUCOURSE_TEST_TAG", str(tmp_path))  # the launched processes inherit it
    with pytest.raises(launch.LaunchError) as info:
        launch.torchrun(write(tmp_path, "crash.py", CRASH), nproc_per_node=2, timeout=60, stream=False)
    message = str(info.value)
    assert message.startswith("rank 1 failed first (exit code 1); torchrun stopped the others"), message
    assert "rank 1 gives up on purpose" in message, "the failed rank's last lines are in the message"
    assert info.value.result.seconds < 30, "a failed rank ends the launch; nobody waits for the timeout"
    assert not _tagged(str(tmp_path))


@pytest.mark.slow
@linux_only
def test_timeout_stops_every_process(tmp_path, monkeypatch):
    pids = tmp_path / "pids"
    pids.mkdir()
    script = write(tmp_path, "hang.py", HANG)
    monkeypatch.setenv("GPUCOURSE_TEST_TAG", str(tmp_path))
    started = time.monotonic()
    with pytest.raises(launch.LaunchError, match="did not finish within 10 s") as info:
        launch.torchrun(script, pids, nproc_per_node=2, timeout=10, stream=False)
    assert info.value.result.timed_out and info.value.result.returncode != 0, "the stopped agents report a failure too"
    assert time.monotonic() - started < 10 + 15, "stopped soon after the timeout"
    for path in pids.iterdir():  # the workers that had started: their own sessions, yet stopped too
        assert not _alive(int(path.read_text())), f"rank {path.name} outlived the timeout"
    assert not _tagged(str(tmp_path)), "no orphaned process"


@pytest.mark.slow
def test_two_local_agents_meet_at_a_rendezvous(tmp_path):
    result = launch.torchrun(write(tmp_path, "ranks.py", RANKS), nproc_per_node=1, nnodes=2, timeout=60, stream=False)
    assert ranks(result) == [0, 1], "two agents, one worker each, ranks 0 and 1 of 2"
    assert "of 2" in result.output(1)[0] and "x2 agents" in result.command


def ranks(result: launch.LaunchResult) -> list[int]:
    """The ranks that printed something."""
    return sorted({int(source[4:]) for source, _ in result.lines if source.startswith("rank")})


def _tagged(tag: str) -> set[int]:
    """Processes (not zombies) whose environment carries GPUCOURSE_TEST_TAG=tag."""
    needle = f"GPUCOURSE_TEST_TAG={tag}".encode()
    found = set()
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                if needle in Path(entry.path, "environ").read_bytes().split(b"\0") and _alive(int(entry.name)):
                    found.add(int(entry.name))
            except OSError:
                pass
    return found


def _alive(pid: int) -> bool:
    """True for a live process; a zombie (exited, waiting for its parent to read its exit code) is dead."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False
