"""Run ``torchrun`` from a notebook: each rank's output, a clear message when a rank fails, and a
timeout (a hang otherwise waits for the backend's: NCCL 10 minutes, gloo 30) after which no process
it started is left."""

import contextlib
import os
import re
import shlex
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

# s for the agents to stop their workers, then we kill all (torchrun kills a stuck one after 5 s;
# torch 2.11: 30)
_GRACE = 10.0
_CAUSES = {  # exit codes
    1: "an uncaught exception, or sys.exit with a message",
    2: "a command-line usage error: an unknown option or a bad argument",
    -9: "SIGKILL: out of memory, or killed from outside",
    -11: "SIGSEGV: a crash in native code",
}


@dataclass
class LaunchResult:
    """What a launch did: its command, each rank's lines (stdout and stderr), and how it ended."""

    command: str
    returncode: int = 0
    seconds: float = 0.0
    timed_out: bool = False
    # (source, text); source "rank0"... or "agent0"...
    lines: list[tuple[str, str]] = field(default_factory=list)

    def output(self, rank: int) -> list[str]:
        return [text for source, text in self.lines if source == f"rank{rank}"]


# torchrun's head of each piece of a rank's output (our TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE)
_HEADER = re.compile(r"\[rank(\d+)\]: ?")


def _rank_lines(text: str, pending: dict[str, str]) -> list[tuple[str | None, str]]:
    """The whole lines in one line of an agent's output, as ``(rank, text)``; rank None: the
    agent's own. torchrun may read a rank's line before the rank has written all of it (an
    unbuffered ``print`` writes the line and its end apart): the pieces then come headed apart,
    among other ranks' lines, and each rank's are joined (``pending``) until one ends a line."""
    parts = _HEADER.split(text)
    lines = [(None, parts[0].rstrip("\n"))] if parts[0].strip() or len(parts) == 1 else []
    pairs = list(zip(parts[1::2], parts[2::2], strict=True))
    for i, (rank, piece) in enumerate(pairs):
        pending[rank] = pending.get(rank, "") + piece
        if i == len(pairs) - 1:  # the agent's line ends here: so does the rank's
            lines.append((rank, pending.pop(rank).rstrip("\n")))
    return lines


class LaunchError(RuntimeError):
    """A launch could not start, failed, or ran out of time; ``result`` holds what ran, if
    anything did."""

    def __init__(self, message: str, result: LaunchResult | None = None):
        super().__init__(message)
        self.result = result


def _children(pid: int) -> list[int]:  # the processes pid started (Linux; elsewhere none)
    with contextlib.suppress(OSError):
        return [
            int(child)
            for path in Path(f"/proc/{pid}/task").glob("*/children")
            for child in path.read_text().split()
        ]
    return []


def _check(script, nproc_per_node, nnodes, timeout) -> Path:
    path = Path(script)
    if not path.is_file():
        raise LaunchError(f"{path} does not exist: write the script first (e.g. with %%writefile).")
    try:
        compile(path.read_text(encoding="utf-8"), str(path), "exec")
    except SyntaxError as error:
        raise LaunchError(
            f"{path.name} has a syntax error (line {error.lineno}): {error.msg}\n    "
            f"{(error.text or '').rstrip()}\nNothing was launched: fix the script and run again."
        ) from None
    for name, value, kind in (
        ("nproc_per_node", nproc_per_node, int),
        ("nnodes", nnodes, int),
        ("timeout", timeout, float),
    ):
        if not isinstance(value, (int, kind)) or isinstance(value, bool) or value <= 0:
            raise LaunchError(
                f"{name} must be a positive {'whole number' if kind is int else 'number'}, got "
                f"{value!r}."
            )
    return path


def _why(result: LaunchResult, timeout: float) -> str:
    if result.timed_out:
        return (
            f"{result.command} did not finish within {timeout:g} s; all its processes were "
            "stopped. A timeout too short, or ranks waiting in a collective another rank never "
            "reaches (NCCL gives up after 10 minutes, gloo after 30)."
        )
    report = [text for source, text in result.lines if source.startswith("agent")]
    root = report[next((i for i, t in enumerate(report) if "Root Cause" in t), 0) :]
    rank = next((int(m[1]) for t in root if (m := re.match(r"\s*rank\s*:\s*(\d+)", t))), None)
    code = next(
        (int(m[1]) for t in root if (m := re.match(r"\s*exitcode\s*:\s*(-?\d+)", t))),
        result.returncode,
    )
    how = f"exit code {code}" if code >= 0 else f"killed by signal {-code}"
    if code in _CAUSES:
        how += f": {_CAUSES[code]}"
    if rank is None:  # e.g. torchrun rejected its own arguments
        return "\n".join(
            [f"{result.command} failed ({how}) before any rank reported an error:", *report[-20:]]
        )
    # torchrun's own lines before its traceback and report: where a rank's output goes when it is
    # not prefixed [rankN]
    own = report[
        : next(
            (
                i
                for i, t in enumerate(report)
                if t.startswith("Traceback (most") or re.fullmatch("=+", t)
            ),
            None,
        )
    ]
    last = result.output(rank)[-15:] or [
        f"(rank {rank} printed nothing; torchrun's last lines before its report:)",
        *own[-15:],
    ]
    return "\n".join(
        [
            f"rank {rank} failed first ({how}); torchrun stopped the others: {result.command}",
            f"Last lines of rank {rank}:",
            *(f"    {t}" for t in last),
        ]
    )


def torchrun(
    script,
    *args,
    nproc_per_node: int = 2,
    nnodes: int = 1,
    timeout: float = 120,
    stream: bool = True,
) -> LaunchResult:
    """``torchrun --nproc-per-node=N script args...``, printing each rank's lines as ``[rankN]:
    ...`` (``stream``); ``nnodes > 1``: that many local agents meet at a c10d rendezvous on
    127.0.0.1."""

    # a thread per agent and stream (torchrun heads a rank's stdout and stderr alike) sorts lines
    def follow(index: int, pipe) -> None:
        pending: dict[str, str] = {}
        for text in pipe:
            for rank, line in _rank_lines(text, pending):
                result.lines.append((f"agent{index}" if rank is None else f"rank{rank}", line))
                if stream and rank is not None:
                    print(f"[rank{rank}]: {line}", flush=True)
        result.lines += [(f"rank{rank}", line) for rank, line in pending.items()]  # cut short

    script = _check(script, nproc_per_node, nnodes, timeout)
    # each process's share of the cores
    threads = str(max(1, (os.cpu_count() or 1) // (nproc_per_node * nnodes)))
    env = {
        "OMP_NUM_THREADS": threads,
        **os.environ,
        "PYTHONUNBUFFERED": "1",
        "TORCH_ELASTIC_SHUTDOWN_TIMEOUT": "5",
        # not the option: torch 2.11's torchrun has none
        "TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE": "[rank${rank}]: ",
    }
    options = ["--standalone", f"--nproc-per-node={nproc_per_node}"]
    if nnodes > 1:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))  # a free port
            options[:1] = [
                "--rdzv-backend=c10d",
                f"--rdzv-endpoint=127.0.0.1:{s.getsockname()[1]}",
                "--rdzv-id=gpucourse",
                f"--nnodes={nnodes}",
            ]
    program = [str(script), *map(str, args)]
    result = LaunchResult(
        shlex.join(["torchrun", *options, *program])
        + (f"  (x{nnodes} agents)" if nnodes > 1 else "")
    )
    agents = []
    readers = []
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="gpucourse-torchrun-") as logs:
        try:
            for i in range(nnodes):
                agents.append(
                    subprocess.Popen(
                        [
                            sys.executable,
                            "-m",
                            "torch.distributed.run",
                            *options,
                            "--tee=3",
                            f"--log-dir={logs}/{i}",
                            *program,
                        ],
                        env=env,
                        stdin=subprocess.DEVNULL,
                        stdout=subprocess.PIPE,
                        stderr=subprocess.PIPE,
                        text=True,
                        errors="replace",
                        start_new_session=True,
                    )
                )
                for pipe in (agents[i].stdout, agents[i].stderr):
                    readers.append(threading.Thread(target=follow, args=(i, pipe), daemon=True))
                    readers[-1].start()
            # until every agent has ended, one failed (the others are stopped below) or time is up
            while True:
                codes = [agent.poll() for agent in agents]
                running = None in codes and not any(codes)
                if not running or time.monotonic() - started >= timeout:
                    break
                time.sleep(0.1)
            result.timed_out = running
        finally:
            for agent in agents:
                # SIGTERM (a no-op on an agent that has ended): torchrun stops its workers' groups
                agent.terminate()
            deadline = time.monotonic() + _GRACE
            while time.monotonic() < deadline and any(a.poll() is None for a in agents):
                time.sleep(0.05)
            # its workers, each in a session of its own, and its group
            for agent in [a for a in agents if a.poll() is None]:
                for group in [*_children(agent.pid), agent.pid]:
                    with contextlib.suppress(OSError):
                        os.killpg(group, signal.SIGKILL)
            for reader in readers:
                reader.join(timeout=_GRACE)  # the rest of each agent's output
            result.seconds = time.monotonic() - started
    codes = [agent.wait() for agent in agents]
    result.returncode = next((code for code in codes if code), 0)
    if result.returncode or result.timed_out:
        raise LaunchError(_why(result, timeout), result)
    return result
