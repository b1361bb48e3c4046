"""Launch ``torchrun`` from a notebook: with a timeout, each rank's output, and no orphans.

``torchrun`` starts one *agent* per machine, and each agent starts its
worker processes (one per GPU, or a few on a CPU), sets ``RANK``,
``LOCAL_RANK``, ``WORLD_SIZE``, ``MASTER_ADDR`` and ``MASTER_PORT`` for them,
and watches them. Run by hand from a notebook it can hang the notebook
(a rank waiting forever for one that died), hide which rank failed in a long
report, and leave workers running after the kernel is interrupted: each
worker runs in a session of its own, so stopping the agent alone does not
stop them. ``torchrun()`` here:

- checks what it can before starting anything: the script exists and
  compiles, the port is free, there are as many GPUs as processes asked for;
- picks a free port (``--standalone`` on one machine; a c10d rendezvous on a
  free loopback port for ``nnodes > 1``, run as that many local agents, so
  multi-node start-up can be seen on one machine);
- prints each rank's output as it comes, every line prefixed ``[rankN]:``;
- stops everything it started when the time is up or a rank fails: the
  agents' process groups, the workers' own sessions, and any process left
  carrying this launch's mark;
- reports which rank failed first, with its exit code and last lines.

Nothing here initializes CUDA in the calling process: GPUs are counted through
NVML (``torch.cuda.device_count()``), and the workers are new programs, not
forks of the caller, so each initializes CUDA for itself.
"""

from __future__ import annotations

import os
import queue
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

MARK = "GPUCOURSE_LAUNCH_ID"
"""Environment variable set to a fresh id in every process a launch starts (agents and workers inherit it)."""

PREFIX = "[rank${rank}]: "  # torchrun's --log-line-prefix-template: the global rank, also across agents
_RANK_LINE = re.compile(r"^\[rank(\d+)\]: ?(.*)$")
_GRACE = 3.0  # seconds between asking processes to stop (SIGTERM) and killing them (SIGKILL)


class LaunchError(RuntimeError):
    """A launch could not start, failed, or ran out of time. ``result`` holds what ran, if anything did."""

    def __init__(self, message: str, result: LaunchResult | None = None):
        super().__init__(message)
        self.result = result


@dataclass
class LaunchResult:
    """What a launch did: its command, each rank's lines, and how it ended."""

    command: str
    returncode: int
    seconds: float
    timed_out: bool = False
    lines: list[tuple[str, str]] = field(default_factory=list)  # (source, text), source "rank0"... or "agent0"...
    failures: list[tuple[int, int]] = field(default_factory=list)  # (rank, exit code), the first observed first
    stopped: int = 0  # processes this helper had to stop itself
    message: str = ""  # why it failed, when it did

    @property
    def ok(self) -> bool:
        return self.returncode == 0 and not self.timed_out

    def output(self, rank: int) -> list[str]:
        """The lines rank ``rank`` printed (stdout and stderr), without their prefix."""
        return [text for source, text in self.lines if source == f"rank{rank}"]

    @property
    def ranks(self) -> list[int]:
        """The ranks that printed anything, in order."""
        return sorted({int(source[4:]) for source, _ in self.lines if source.startswith("rank")})

    def agent_output(self) -> list[str]:
        """What the torchrun agents themselves printed (start-up, the failure report)."""
        return [f"[{source}] {text}" for source, text in self.lines if source.startswith("agent")]

    def __str__(self) -> str:
        state = "timed out" if self.timed_out else f"exit code {self.returncode}"
        return f"{self.command}: {state} after {self.seconds:.1f} s, {len(self.ranks)} rank(s) printed output"


def port_is_free(port: int, host: str = "") -> bool:
    """True when a server could listen on ``port`` now (``host=""``: on every interface, as the c10d store does)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port nobody listens on right now (the operating system's choice)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def gpu_count() -> int:
    """CUDA GPUs visible to new processes, counted without initializing CUDA here (NVML, or 0)."""
    try:
        import torch
    except ImportError:
        return 0
    return max(torch.cuda.device_count(), 0)  # NVML first: does not poison fork, and respects CUDA_VISIBLE_DEVICES


def check_script(script: str | os.PathLike) -> Path:
    """The script's path, or a ``LaunchError`` saying why it cannot run (missing, or a syntax error)."""
    path = Path(script)
    if not path.is_file():
        raise LaunchError(f"{path} does not exist: write the script first (e.g. with %%writefile).")
    try:
        compile(path.read_text(encoding="utf-8"), str(path), "exec")
    except SyntaxError as error:
        where = f"line {error.lineno}" + (f", column {error.offset}" if error.offset else "")
        code = (error.text or "").rstrip()
        raise LaunchError(
            f"{path.name} has a syntax error ({where}): {error.msg}" + (f"\n    {code}" if code else "")
            + "\nNothing was launched: fix the script and run again."
        ) from None
    return path


def _check_arguments(nproc_per_node, nnodes, timeout, port, device) -> None:
    for name, value in (("nproc_per_node", nproc_per_node), ("nnodes", nnodes)):
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise LaunchError(f"{name} must be a whole number of at least 1, got {value!r}.")
    if not timeout or timeout <= 0:
        raise LaunchError(f"timeout must be a positive number of seconds, got {timeout!r}.")
    if port is not None and not port_is_free(port):
        raise LaunchError(
            f"port {port} is in use (another job, or an earlier launch that is still running?): "
            "pass port=None and a free one is picked. Nothing was launched."
        )
    kind = None if device is None else getattr(device, "type", str(device).split(":")[0])
    if kind == "cuda":
        gpus = gpu_count()
        if gpus == 0:
            raise LaunchError(
                f"device={str(device)!r} asks for one process per GPU, but this machine shows no CUDA GPU: "
                "run the processes on the CPU instead (device='cpu', gloo). Nothing was launched."
            )
        if nproc_per_node > gpus:
            raise LaunchError(
                f"nproc_per_node={nproc_per_node} asks for one process per GPU, but this machine shows {gpus} "
                f"CUDA GPU(s) (CUDA_VISIBLE_DEVICES may hide some): use nproc_per_node={gpus} or fewer. "
                "Nothing was launched."
            )


def torchrun_command(script, *args, nproc_per_node: int = 2, nnodes: int = 1, rdzv_endpoint: str | None = None,
                     run_id: str | None = None, log_dir: str | None = None) -> list[str]:
    """The ``python -m torch.distributed.run`` (= ``torchrun``) command for one agent.

    Without ``rdzv_endpoint``: ``--standalone`` (one machine; torchrun picks a free port).
    With it: a c10d rendezvous at that ``host:port`` for ``nnodes`` agents.
    """
    command = [sys.executable, "-m", "torch.distributed.run"]
    if rdzv_endpoint is None:
        command += ["--standalone"]
    else:
        command += ["--rdzv-backend=c10d", f"--rdzv-endpoint={rdzv_endpoint}", f"--rdzv-id={run_id or 'gpucourse'}"]
    if rdzv_endpoint is not None or nnodes != 1:
        command += [f"--nnodes={nnodes}"]
    command += [f"--nproc-per-node={nproc_per_node}", "--tee=3",
                f"--log-line-prefix-template={PREFIX}"]
    if log_dir is not None:
        command += [f"--log-dir={log_dir}"]
    return [*command, str(script), *map(str, args)]


def _display(command: list[str]) -> str:
    shown = ["torchrun" if i == 0 else part for i, part in enumerate(command) if i not in (1, 2)]
    return " ".join(shlex.quote(part) for part in shown if not part.startswith(("--tee", "--log-")))


# --- stopping processes -----------------------------------------------------------------------------------------

def _children() -> dict[int, list[int]]:
    """ppid -> pids, for every process this user can see (``/proc`` on Linux, ``ps`` elsewhere)."""
    tree: dict[int, list[int]] = {}
    if Path("/proc").is_dir() and Path(f"/proc/{os.getpid()}/stat").exists():
        for entry in os.scandir("/proc"):
            if entry.name.isdigit():
                try:
                    stat = Path(entry.path, "stat").read_text()
                except OSError:
                    continue
                ppid = int(stat.rsplit(")", 1)[1].split()[1])
                tree.setdefault(ppid, []).append(int(entry.name))
        return tree
    try:
        listing = subprocess.run(["ps", "-A", "-o", "pid=,ppid="], capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.SubprocessError):
        return tree
    for line in listing.splitlines():
        pid, ppid = map(int, line.split())
        tree.setdefault(ppid, []).append(pid)
    return tree


def _descendants(pids: list[int]) -> set[int]:
    tree, found, todo = _children(), set(), list(pids)
    while todo:
        for child in tree.get(todo.pop(), []):
            if child not in found:
                found.add(child)
                todo.append(child)
    return found


def marked_processes(mark: str) -> set[int]:
    """Live processes (not zombies) whose environment carries ``GPUCOURSE_LAUNCH_ID=mark`` (Linux; empty elsewhere)."""
    needle = f"{MARK}={mark}".encode()
    found = set()
    if not Path("/proc").is_dir():
        return found
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            if needle in Path(entry.path, "environ").read_bytes().split(b"\0"):
                if Path(entry.path, "stat").read_text().rsplit(")", 1)[1].split()[0] != "Z":
                    found.add(int(entry.name))
        except OSError:
            continue
    return found


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # a zombie is dead: it only waits for its parent to read its exit code
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return True


def _signal(pids, sig) -> None:
    for pid in pids:
        try:
            if hasattr(os, "killpg"):
                try:
                    os.killpg(pid, sig)  # the process's group: a worker's own DataLoader workers too
                except (ProcessLookupError, PermissionError):
                    pass
            os.kill(pid, sig)
        except (ProcessLookupError, PermissionError, OSError):
            pass


def _stop(agents: list[subprocess.Popen], mark: str) -> int:
    """Stop the agents, their workers and anything else carrying ``mark``; returns how many were alive."""
    pids = {p.pid for p in agents if p.poll() is None}
    pids |= _descendants([p.pid for p in agents]) | marked_processes(mark)
    alive = {pid for pid in pids if _alive(pid)}
    if not alive:
        return 0
    _signal(alive, signal.SIGTERM)
    deadline = time.monotonic() + _GRACE
    while time.monotonic() < deadline and any(_alive(pid) for pid in alive | marked_processes(mark)):
        for p in agents:
            p.poll()  # reap the agents we started, so they do not linger as zombies
        time.sleep(0.05)
    rest = {pid for pid in alive | _descendants(list(alive)) | marked_processes(mark) if _alive(pid)}
    _signal(rest, getattr(signal, "SIGKILL", signal.SIGTERM))
    for p in agents:
        try:
            p.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass
    return len(alive)


# --- reading the output -----------------------------------------------------------------------------------------

def _read(index: int, stream, lines: queue.Queue) -> None:
    for raw in iter(stream.readline, ""):
        lines.put((index, raw.rstrip("\n")))
    lines.put((index, None))


_FAILED_RANK = re.compile(r"^\s*rank\s*:\s*(\d+)")
_EXIT_CODE = re.compile(r"^\s*exitcode\s*:\s*(-?\d+)")


def _failures(agent_lines: list[str]) -> list[tuple[int, int]]:
    """(rank, exit code) from torchrun's failure report, the root cause first."""
    found, root, rank, in_root = [], [], None, False
    for line in agent_lines:
        if "Root Cause" in line:
            in_root = True
        if m := _FAILED_RANK.match(line):
            rank = int(m.group(1))
        elif (m := _EXIT_CODE.match(line)) and rank is not None:
            (root if in_root else found).append((rank, int(m.group(1))))
            rank = None
    return root + [f for f in found if f not in root]


def _explain(code: int) -> str:
    if code < 0:
        try:
            return f"killed by signal {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit code {code}"


def _failure_message(result: LaunchResult, timeout: float) -> str:
    if result.timed_out:
        head = (f"{result.command} did not finish within {timeout:g} s and was stopped "
                f"({result.stopped} process(es) ended, none left running).")
        quiet = [] if result.ranks else ["No rank printed anything: it may still have been starting up."]
        return "\n".join([head, *quiet, "A rank waiting for another (a collective the others never reach) "
                          "hangs like this; so does a timeout too short for the work."])
    if result.failures:
        rank, code = result.failures[0]
        others = ", ".join(f"rank {r} ({_explain(c)})" for r, c in result.failures[1:])
        lines = [f"rank {rank} failed first ({_explain(code)})" + (f"; then {others}" if others else "")
                 + f": {result.command}"]
        tail = result.output(rank)[-15:]
        if tail:
            lines += [f"Last lines of rank {rank}:", *(f"    {text}" for text in tail)]
        return "\n".join(lines)
    tail = result.agent_output()[-20:]
    return "\n".join([f"{result.command} failed ({_explain(result.returncode)}) before any rank reported an error. "
                      "torchrun said:", *(f"    {text}" for text in tail)])


def torchrun(script, *args, nproc_per_node: int = 2, nnodes: int = 1, port: int | None = None, device=None,
             timeout: float = 120, env: dict | None = None, cwd=None, stream: bool = True,
             check: bool = True) -> LaunchResult:
    """Run ``torchrun --nproc-per-node=N script args...`` and wait at most ``timeout`` seconds.

    - ``nnodes=1`` and no ``port``: ``torchrun --standalone`` (a free port is picked by torchrun);
      with ``port``: a c10d rendezvous on ``127.0.0.1:port`` (``LaunchError`` at once if it is in use).
    - ``nnodes > 1``: that many local agents, each with ``nproc_per_node`` workers, meeting at a c10d
      rendezvous on a free loopback port: what ``torchrun --nnodes`` does across machines, on one.
    - ``device``: ``"cuda"`` (or a CUDA ``torch.device``) checks there is one GPU per process; ``None`` or
      ``"cpu"`` checks nothing. The script chooses its backend (NCCL or gloo) itself.
    - ``stream``: print each rank's lines as they come, prefixed ``[rankN]:``.
    - ``check``: raise ``LaunchError`` (its message names the rank that failed first, with its last
      lines) when a rank fails or the time is up; with ``check=False`` the ``LaunchResult`` says so.

    Every process started is stopped before this returns, whatever happens (also on ``KeyboardInterrupt``).
    """
    script = check_script(script)
    _check_arguments(nproc_per_node, nnodes, timeout, port, device)
    mark = uuid.uuid4().hex
    run_env = {**os.environ, **(env or {}), MARK: mark, "PYTHONUNBUFFERED": "1"}
    # torchrun sets 1 thread per worker (and says so in a warning) unless told; share the cores out instead.
    run_env.setdefault("OMP_NUM_THREADS", str(max(1, (os.cpu_count() or 1) // (nproc_per_node * nnodes))))
    endpoint = None
    if nnodes > 1 or port is not None:
        endpoint = f"127.0.0.1:{port if port is not None else free_port()}"
    log_root = tempfile.mkdtemp(prefix="gpucourse-torchrun-")
    commands = [torchrun_command(script, *args, nproc_per_node=nproc_per_node, nnodes=nnodes, rdzv_endpoint=endpoint,
                                 run_id=mark[:12], log_dir=os.path.join(log_root, f"agent{i}")) for i in range(nnodes)]
    shown = _display(commands[0]) + (f"  (x{nnodes} agents)" if nnodes > 1 else "")
    started = time.monotonic()
    agents: list[subprocess.Popen] = []
    lines: queue.Queue = queue.Queue()
    result = LaunchResult(command=shown, returncode=0, seconds=0.0)
    try:
        for command in commands:
            popen_kwargs = {"start_new_session": True} if os.name == "posix" else {}
            agent = subprocess.Popen(command, env=run_env, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL, text=True, errors="replace", **popen_kwargs)
            agents.append(agent)
            threading.Thread(target=_read, args=(len(agents) - 1, agent.stdout, lines), daemon=True).start()
        open_streams, first_exit = len(agents), None
        while open_streams:
            now = time.monotonic()
            if now - started > timeout:
                result.timed_out = True
                break
            if first_exit is not None and now - first_exit > 2 * _GRACE:  # one agent failed, the others wait on it
                break
            try:
                index, text = lines.get(timeout=0.1)
            except queue.Empty:
                codes = [a.poll() for a in agents]
                if first_exit is None and any(c not in (None, 0) for c in codes):
                    first_exit = now
                continue
            if text is None:
                open_streams -= 1
                continue
            match = _RANK_LINE.match(text)
            source = f"rank{match.group(1)}" if match else f"agent{index}"
            result.lines.append((source, match.group(2) if match else text))
            if stream and match:
                print(text, flush=True)
        for agent in agents:  # every stream is closed: the agents are exiting (or were stopped above)
            if not result.timed_out and first_exit is None:
                try:
                    agent.wait(timeout=max(0.1, timeout - (time.monotonic() - started)))
                except subprocess.TimeoutExpired:
                    result.timed_out = True
    finally:
        result.stopped = _stop(agents, mark)
        while True:  # what was printed while stopping
            try:
                index, text = lines.get_nowait()
            except queue.Empty:
                break
            if text is not None:
                match = _RANK_LINE.match(text)
                result.lines.append((f"rank{match.group(1)}" if match else f"agent{index}",
                                     match.group(2) if match else text))
        result.seconds = time.monotonic() - started
        shutil.rmtree(log_root, ignore_errors=True)
    codes = [a.returncode if a.returncode is not None else -9 for a in agents]
    result.returncode = next((c for c in codes if c != 0), 0)
    result.failures = _failures([text for source, text in result.lines if source.startswith("agent")])
    if not result.ok:
        result.message = _failure_message(result, timeout)
        if check:
            raise LaunchError(result.message, result)
    return result
