"""Run ``torchrun`` from a notebook: each rank's output, a clear message when a rank fails, and a
timeout (a hang otherwise waits for the backend's: NCCL 10 minutes, gloo 30) after which no process
it started is left.

torchrun writes each rank's output to files of its own (``--tee=3 --log-dir=...``):
``<log dir>/<run id>_<random>/attempt_0/<local rank>/`` holds ``stdout.log``, ``stderr.log`` and,
from a script whose entry point has ``@record``, ``error.json``. A rank's lines are read from there;
the console, where torchrun heads each piece it reads with its rank, is only shown.

The workers inherit the notebook's environment except ``TORCH_ALLOW_TF32_CUBLAS_OVERRIDE``, which
they get as 0: NVIDIA's PyTorch containers set it to 1, and their float32 matmuls would then run in
TF32, unlike the float32 reference a lesson compares the ranks with. Where ``OMP_NUM_THREADS`` is
unset, each rank gets its share of the cores this process may use (``loaders.available_cores``).
"""

import contextlib
import json
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

from .loaders import available_cores

# s for the agents to stop their workers, then we kill all (torchrun kills a stuck one after 5 s;
# torch 2.11: 30)
_GRACE = 10.0
TF32_OVERRIDE_VAR = "TORCH_ALLOW_TF32_CUBLAS_OVERRIDE"  # cleared for the workers
_CAUSES = {  # exit codes
    1: "an uncaught exception, or sys.exit with a message",
    2: "a command-line usage error: an unknown option or a bad argument",
    -9: "SIGKILL: out of memory, or killed from outside",
    -11: "SIGSEGV: a crash in native code",
}


@dataclass
class LaunchResult:
    """What a launch did: its command, how it ended, each rank's lines (its stdout's, then its
    stderr's) and what the agents printed."""

    command: str
    returncode: int = 0
    seconds: float = 0.0
    timed_out: bool = False
    ranks: dict[int, list[str]] = field(default_factory=dict)  # rank -> its lines
    errors: dict[int, str] = field(default_factory=dict)  # rank -> its error.json's exception
    console: list[str] = field(default_factory=list)  # the agents' output, as torchrun printed it

    def output(self, rank: int) -> list[str]:
        return self.ranks.get(rank, [])


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


def _read_ranks(logs: Path, first_rank: int, result: LaunchResult) -> None:
    """One agent's ranks from its log folder: ``first_rank`` + the local rank."""
    for folder in logs.glob("*/attempt_0/*"):
        rank = first_rank + int(folder.name)
        result.ranks[rank] = [
            line
            for name in ("stdout.log", "stderr.log")
            if (folder / name).is_file()
            for line in (folder / name).read_text(errors="replace").splitlines()
        ]
        with contextlib.suppress(OSError, ValueError, KeyError, TypeError):
            error = json.loads((folder / "error.json").read_text())["message"]
            result.errors[rank] = error if isinstance(error, str) else error["message"]


def _why(result: LaunchResult, timeout: float) -> str:
    if result.timed_out:
        return (
            f"{result.command} did not finish within {timeout:g} s; all its processes were "
            "stopped. A timeout too short, or ranks waiting in a collective another rank never "
            "reaches (NCCL gives up after 10 minutes, gloo after 30)."
        )
    # the agent's report names the rank that failed first and its exit code
    report = result.console[
        next((i for i, t in enumerate(result.console) if "Root Cause" in t), 0) :
    ]
    rank = next((int(m[1]) for t in report if (m := re.match(r"\s*rank\s*:\s*(\d+)", t))), None)
    code = next(
        (int(m[1]) for t in report if (m := re.match(r"\s*exitcode\s*:\s*(-?\d+)", t))),
        result.returncode,
    )
    how = f"exit code {code}" if code >= 0 else f"killed by signal {-code}"
    if code in _CAUSES:
        how += f": {_CAUSES[code]}"
    if rank is None:  # e.g. torchrun rejected its own arguments
        return "\n".join(
            [
                f"{result.command} failed ({how}) before any rank reported an error:",
                *result.console[-20:],
            ]
        )
    cause = [f"Root cause: {result.errors[rank]}"] if rank in result.errors else []
    return "\n".join(
        [
            f"rank {rank} failed first ({how}); torchrun stopped the others: {result.command}",
            *cause,
            f"Last lines of rank {rank}:",
            *(f"    {t}" for t in result.output(rank)[-15:] or [f"(rank {rank} printed nothing)"]),
        ]
    )


def _wait(agents: list[subprocess.Popen], deadline: float) -> bool:
    """Until every agent has ended, one has failed (the others are stopped after) or time is up:
    True in the last case."""
    while True:
        codes = [agent.poll() for agent in agents]
        running = None in codes and not any(codes)
        if not running or time.monotonic() >= deadline:
            return running
        time.sleep(0.1)


def _stop(agents: list[subprocess.Popen]) -> None:
    """Every agent and its workers: SIGTERM (a no-op on an agent that has ended), on which torchrun
    stops its workers, then after a grace SIGKILL to whatever is left."""
    for agent in agents:
        agent.terminate()
    deadline = time.monotonic() + _GRACE
    while time.monotonic() < deadline and any(a.poll() is None for a in agents):
        time.sleep(0.05)
    # its workers, each in a session of its own, and its group
    for agent in [a for a in agents if a.poll() is None]:
        for group in [*_children(agent.pid), agent.pid]:
            with contextlib.suppress(OSError):
                os.killpg(group, signal.SIGKILL)


def _options(nproc_per_node: int, nnodes: int) -> list[str]:
    """torchrun's options before the script: standalone, or ``nnodes`` agents meeting at a c10d
    rendezvous on a free port of 127.0.0.1."""
    if nnodes == 1:
        return ["--standalone", f"--nproc-per-node={nproc_per_node}"]
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))  # a free port
        port = s.getsockname()[1]
    return [
        "--rdzv-backend=c10d",
        f"--rdzv-endpoint=127.0.0.1:{port}",
        "--rdzv-id=gpucourse",
        f"--nnodes={nnodes}",
        f"--nproc-per-node={nproc_per_node}",
    ]


def _environment(processes: int) -> dict[str, str]:
    # a share of the cores this process may use (its affinity, a container's CPU quota), not the
    # host's count: a container on a 64-core host with 4 CPUs would otherwise run 32 threads a rank
    cores = available_cores()
    return {
        "OMP_NUM_THREADS": str(max(1, cores // processes)),
        **os.environ,
        "PYTHONUNBUFFERED": "1",
        "TORCH_ELASTIC_SHUTDOWN_TIMEOUT": "5",
        # the console's head of each rank's piece; not the option: torch 2.11's torchrun has none
        "TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE": "[rank${rank}]: ",
        # NVIDIA's PyTorch containers set it to 1: PyTorch reads it at import as the default of
        # float32_matmul_precision ("high": float32 matmuls in TF32 on Ampere and newer), and the
        # ranks then differ from a float32 reference by far more than rounding. 0: PyTorch's own
        # default, "highest"; a script's fp32_precision or set_float32_matmul_precision still wins.
        TF32_OVERRIDE_VAR: "0",
    }


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

    def follow(pipe) -> None:  # a thread per agent and stream: shown, kept for torchrun's report
        for text in pipe:
            result.console.append(text.rstrip("\n"))
            if stream and text.startswith("[rank"):
                print(text.rstrip("\n"), flush=True)

    script = _check(script, nproc_per_node, nnodes, timeout)
    options = _options(nproc_per_node, nnodes)
    program = [str(script), *map(str, args)]
    result = LaunchResult(
        shlex.join(["torchrun", *options, *program])
        + (f"  (x{nnodes} agents)" if nnodes > 1 else "")
    )
    agents, readers = [], []
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="gpucourse-torchrun-") as logs:
        try:
            for i in range(nnodes):
                command = [sys.executable, "-m", "torch.distributed.run", *options]
                agents.append(
                    subprocess.Popen(
                        [*command, "--tee=3", f"--log-dir={logs}/{i}", *program],
                        env=_environment(nproc_per_node * nnodes),
                        stdin=subprocess.DEVNULL,
                        stdout=subprocess.PIPE,
                        stderr=subprocess.PIPE,
                        text=True,
                        errors="replace",
                        start_new_session=True,
                    )
                )
                for pipe in (agents[i].stdout, agents[i].stderr):
                    readers.append(threading.Thread(target=follow, args=(pipe,), daemon=True))
                    readers[-1].start()
            result.timed_out = _wait(agents, started + timeout)
        finally:
            _stop(agents)
            for reader in readers:
                reader.join(timeout=_GRACE)  # the rest of each agent's output
            result.seconds = time.monotonic() - started
            # the c10d rendezvous numbers the agents of one host in the order of their process ids
            # (torch's dynamic_rendezvous sorts them); an agent's ranks follow its number's
            by_pid = sorted(agents, key=lambda agent: agent.pid)
            for i, agent in enumerate(agents):
                _read_ranks(Path(logs, str(i)), by_pid.index(agent) * nproc_per_node, result)
    codes = [agent.wait() for agent in agents]
    result.returncode = next((code for code in codes if code), 0)
    if result.returncode or result.timed_out:
        raise LaunchError(_why(result, timeout), result)
    return result
