"""Run ``torchrun`` from a notebook: a timeout, each rank's output, a clear message, no orphans.

``torchrun`` starts one *agent* per machine; the agent starts the worker processes (each in a session of its
own), tells each its rank, and watches them. When one worker fails it stops all the others itself (torch's
``elastic/multiprocessing/api.py``: "if ALL procs are finished or ANY have failed: self.close()"), and on
SIGTERM it stops its workers' process groups (``subprocess_handler.close`` calls ``os.killpg``). What it
cannot see is a *hang*: ranks waiting in a collective that never completes wait for the backend's timeout
(10 minutes for NCCL, 30 for gloo). So ``torchrun()`` adds a timeout: SIGTERM to every agent, then, after a
grace period, SIGKILL to the agent's process group and to its workers' groups.
"""

from __future__ import annotations

import contextlib
import os
import queue
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

_RANK_LINE = re.compile(r"^\[rank(\d+)\]: ?(.*)$")  # what --log-line-prefix-template="[rank${rank}]: " writes
_GRACE = 10.0  # seconds the agents get to stop their workers before everything left is killed


class LaunchError(RuntimeError):
    """A launch could not start, failed, or ran out of time; ``result`` holds what ran, if anything did."""

    def __init__(self, message: str, result: LaunchResult | None = None):
        super().__init__(message)
        self.result = result


@dataclass
class LaunchResult:
    """What a launch did: its command, each rank's lines (stdout and stderr), and how it ended."""

    command: str
    returncode: int = 0
    seconds: float = 0.0
    timed_out: bool = False
    lines: list[tuple[str, str]] = field(default_factory=list)  # (source, text); source "rank0"... or "agent0"...
    message: str = ""

    @property
    def ok(self) -> bool:
        return self.returncode == 0 and not self.timed_out

    def output(self, rank: int) -> list[str]:
        return [text for source, text in self.lines if source == f"rank{rank}"]

    @property
    def ranks(self) -> list[int]:
        return sorted({int(source[4:]) for source, _ in self.lines if source.startswith("rank")})


def _read(index: int, stream, lines: queue.Queue) -> None:
    for text in stream:
        lines.put((index, text.rstrip("\n")))
    lines.put((index, None))


def _check(script, nproc_per_node, nnodes, timeout, port, device) -> Path:
    path = Path(script)
    if not path.is_file():
        raise LaunchError(f"{path} does not exist: write the script first (e.g. with %%writefile).")
    try:
        compile(path.read_text(encoding="utf-8"), str(path), "exec")
    except SyntaxError as error:
        raise LaunchError(f"{path.name} has a syntax error (line {error.lineno}): {error.msg}\n    "
                          f"{(error.text or '').rstrip()}\nNothing was launched: fix the script and run again.") from None
    for name, value in (("nproc_per_node", nproc_per_node), ("nnodes", nnodes)):
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise LaunchError(f"{name} must be a whole number of at least 1, got {value!r}.")
    if not isinstance(timeout, (int, float)) or timeout <= 0:
        raise LaunchError(f"timeout must be a positive number of seconds, got {timeout!r}.")
    with socket.socket() as s:
        taken = port is not None and s.connect_ex(("127.0.0.1", port)) == 0  # somebody listens there
    if taken:
        raise LaunchError(f"port {port} is in use (another job, or an earlier launch still running?): "
                          "pass port=None and a free one is picked. Nothing was launched.")
    if str(device).startswith("cuda"):
        import torch

        if nproc_per_node > torch.cuda.device_count():  # the workers, not this process, initialize CUDA
            raise LaunchError(f"nproc_per_node={nproc_per_node} asks for one GPU per process, but this machine shows "
                              f"{torch.cuda.device_count()} CUDA GPU(s): use fewer processes, or gloo on the CPU "
                              "(two NCCL ranks cannot share one GPU). Nothing was launched.")
    return path


def _stop(agents: list[subprocess.Popen]) -> None:
    """SIGTERM the running agents (each stops its workers), then SIGKILL what is left of them and their workers."""
    running = [a for a in agents if a.poll() is None]
    workers = [int(p.name) for p in Path("/proc").glob("[0-9]*") if _parent(p) in {a.pid for a in running}]
    for agent in running:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(agent.pid, signal.SIGTERM)  # torchrun's handler stops the workers, then the agent exits
    deadline = time.monotonic() + _GRACE
    while time.monotonic() < deadline and any(a.poll() is None for a in running):
        time.sleep(0.05)
    for pid in [a.pid for a in running if a.poll() is None] + workers:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pid, signal.SIGKILL)  # a worker's group holds its own children too (DataLoader workers)
    for agent in agents:
        agent.wait()


def _parent(proc: Path) -> int | None:  # from /proc/<pid>/stat (Linux; elsewhere there is no /proc and no worker list)
    try:
        return int((proc / "stat").read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return None


def _why(result: LaunchResult, timeout: float) -> str:
    if result.timed_out:
        return (f"{result.command} did not finish within {timeout:g} s and was stopped, with all its processes. "
                "Ranks waiting in a collective that another rank never reaches hang like this (NCCL gives up after "
                "10 minutes, gloo after 30); so does a timeout too short for the work.")
    report = [text for source, text in result.lines if source.startswith("agent")]
    root = report[next((i for i, t in enumerate(report) if "Root Cause" in t), 0):]
    rank = next((int(m[1]) for t in root if (m := re.match(r"\s*rank\s*:\s*(\d+)", t))), None)
    code = next((int(m[1]) for t in root if (m := re.match(r"\s*exitcode\s*:\s*(-?\d+)", t))), result.returncode)
    how = f"exit code {code}" if code >= 0 else f"killed by signal {-code}"
    if rank is None:
        return "\n".join([f"{result.command} failed ({how}) before any rank reported an error:", *report[-20:]])
    return "\n".join([f"rank {rank} failed first ({how}); torchrun stopped the others: {result.command}",
                      f"Last lines of rank {rank}:", *(f"    {t}" for t in result.output(rank)[-15:])])


def torchrun(script, *args, nproc_per_node: int = 2, nnodes: int = 1, port: int | None = None, device=None,
             timeout: float = 120, env: dict | None = None, stream: bool = True, check: bool = True) -> LaunchResult:
    """Run ``torchrun --nproc-per-node=N script args...`` and wait at most ``timeout`` seconds.

    ``nnodes=1`` runs ``--standalone``; ``nnodes > 1`` (or a ``port``) runs that many local agents meeting at a
    c10d rendezvous on 127.0.0.1: what ``torchrun --nnodes`` does across machines. ``device="cuda"`` checks there
    is a GPU per process (the script picks its backend). Each rank's lines are printed as they come, prefixed
    ``[rankN]:`` (``stream``). A failed rank or the timeout raises ``LaunchError`` (``check``) naming the rank that
    failed first. Every process started is stopped before this returns, also on ``KeyboardInterrupt``.
    """
    script = _check(script, nproc_per_node, nnodes, timeout, port, device)
    run_env = {**os.environ, **(env or {}), "PYTHONUNBUFFERED": "1"}
    run_env.setdefault("OMP_NUM_THREADS", str(max(1, (os.cpu_count() or 1) // (nproc_per_node * nnodes))))
    options = ["--standalone"]
    if nnodes > 1 or port is not None:
        with socket.socket() as s:
            s.bind(("127.0.0.1", port or 0))
            options = ["--rdzv-backend=c10d", f"--rdzv-endpoint=127.0.0.1:{s.getsockname()[1]}",
                       "--rdzv-id=gpucourse", f"--nnodes={nnodes}"]
    options.append(f"--nproc-per-node={nproc_per_node}")
    program = [str(script), *map(str, args)]
    result = LaunchResult(shlex.join(["torchrun", *options, *program]) + (f"  (x{nnodes} agents)" if nnodes > 1 else ""))
    logs = tempfile.TemporaryDirectory(prefix="gpucourse-torchrun-")
    lines, agents, started = queue.Queue(), [], time.monotonic()
    try:
        for i in range(nnodes):
            agents.append(subprocess.Popen(
                [sys.executable, "-m", "torch.distributed.run", *options, "--tee=3", f"--log-dir={logs.name}/{i}",
                 "--log-line-prefix-template=[rank${rank}]: ", *program], env=run_env, stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, errors="replace", start_new_session=True))
            threading.Thread(target=_read, args=(i, agents[i].stdout, lines), daemon=True).start()
        open_streams, failed_at = nnodes, None
        while open_streams and not result.timed_out:
            now = time.monotonic()
            result.timed_out = now - started > timeout
            if failed_at is None and any(a.poll() not in (None, 0) for a in agents):
                failed_at = now  # one agent failed: the other agents' workers may wait for it forever
            if failed_at is not None and now - failed_at > _GRACE:
                break
            try:
                index, text = lines.get(timeout=0.1)
            except queue.Empty:
                continue
            if text is None:
                open_streams -= 1
                continue
            match = _RANK_LINE.match(text)
            result.lines.append((f"rank{match[1]}", match[2]) if match else (f"agent{index}", text))
            if stream and match:
                print(text, flush=True)
        for agent in agents:  # every stream is closed: the agents are exiting
            if not result.timed_out and failed_at is None:
                try:
                    agent.wait(timeout=max(0.1, timeout - (time.monotonic() - started)))
                except subprocess.TimeoutExpired:
                    result.timed_out = True
    finally:
        _stop(agents)
        logs.cleanup()
        result.seconds = time.monotonic() - started
    result.returncode = next((a.returncode for a in agents if a.returncode != 0), 0)
    if not result.ok:
        result.message = _why(result, timeout)
        if check:
            raise LaunchError(result.message, result)
    return result
