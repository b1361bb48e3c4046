"""The runs a report is built from, each a child process in its own process group (a timeout or a
stop ends its kernels too): a lesson under nbval with its claims file, a pytest run (the gpu tests,
a lesson's grading), the doctor; and the reading of what they left (JUnit XML, claims
JSON lines), so a report can be rebuilt from the artifacts folder alone."""

from __future__ import annotations

import contextlib
import importlib.metadata
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from pathlib import Path

from ..course import ROOT, code_cells
from ..text import strip_ansi

REQUIRE_GPU_VAR, CLAIMS_VAR = "GPUCOURSE_REQUIRE_GPU", "GPUCOURSE_CLAIMS"
DEFER_VAR, REHEARSAL_VAR = "GPUCOURSE_CLAIMS_DEFER", "GPUCOURSE_REHEARSAL"
CUDA_TESTS = "tests/gpu/test_on_cuda.py"
# A code cell is in its lesson's TensorFlow or DALI part when it matches; else (set-up too) PyTorch.
PARTS = {
    "TensorFlow": re.compile(r"\btf\.|\bkeras\b|import_tensorflow\(|^\s*import tensorflow", re.M),
    "DALI": re.compile(r"\bdali\b|import_dali\(|pipeline_def|nvidia\.dali", re.I),
}
RUNNING: set[subprocess.Popen] = set()  # what a stop must end


def child_env(rehearsal: bool = False) -> dict:
    """Strict mode on (off in a rehearsal); gpucourse and coursetools from this checkout."""
    drop = {CLAIMS_VAR, REQUIRE_GPU_VAR, REHEARSAL_VAR, DEFER_VAR}
    env = {k: v for k, v in os.environ.items() if k not in drop}
    env.update({REHEARSAL_VAR: "1"} if rehearsal else {REQUIRE_GPU_VAR: "1"})
    paths = (str(ROOT / "utils"), str(ROOT / "tools"), env.get("PYTHONPATH"))
    return {**env, "PYTHONPATH": os.pathsep.join(p for p in paths if p)}


def cell_parts(path: Path) -> list[str]:
    """Each code cell's part of the lesson, in nbval's order ("Cell N" is the N-th code cell)."""
    found = []
    for code in code_cells(path):
        part = next((p for p, regex in PARTS.items() if regex.search(code)), "PyTorch")
        found.append("PyTorch" if code.lstrip().startswith("# Set-up:") else part)
    return found


def execute(command: list[str], log: Path, timeout: float, env: dict) -> dict:
    """Run ``command`` into ``log``; at ``timeout`` seconds its whole process group is killed."""
    start = time.monotonic()
    with open(log, "w", encoding="utf-8") as out:
        out.write("$ " + " ".join(map(str, command)) + "\n")
        out.flush()
        child = subprocess.Popen(
            command, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )
        RUNNING.add(child)
        try:
            returncode, timed_out = child.wait(timeout=max(timeout, 1)), False
        except subprocess.TimeoutExpired:
            stop(child)
            returncode, timed_out = None, True
        finally:
            RUNNING.discard(child)
    seconds = round(time.monotonic() - start, 1)
    return {"returncode": returncode, "timed_out": timed_out, "seconds": seconds}


def stop(child: subprocess.Popen) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(child.pid, signal.SIGKILL)
    child.wait()


def command(step: dict, artifacts: Path, limit: float) -> list[str]:
    """A step's command: nbval on a lesson (kept as it ran, for the book: executed-gpu/), a lesson's
    grading (or the small assignment's: it proves the grading stack), the gpu tests."""
    if step["kind"] in {"lesson", "rerun"}:
        args = [step["notebook"], "--nbval-lax", "--nbval-current-env", "--nbval-cell-timeout"]
        args += [str(limit), "-p", "coursetools.executed", "--save-executed"]
        args.append(str(artifacts / "executed-gpu"))
    else:
        lesson = step["lesson"] and f"autograde_on_the_gpu and {step['lesson']}"
        which = "not autograde_on_the_gpu and not small_assignment"
        which = (lesson or "small_assignment") if step["kind"] == "grading" else which
        args = [CUDA_TESTS, "-m", "gpu", "-k", which]
    return [
        sys.executable, "-m", "pytest", *args, "-p", "no:xdist", "-p", "no:cacheprovider",
        "-o", "junit_family=xunit1", f"--junitxml={artifacts / step['junit']}", "-rfEs",
    ]  # fmt: skip


def read_claims(path: Path) -> list[dict]:
    """The JSON lines gpucourse.claims wrote; a line cut short by a stop is skipped."""
    entries = []
    for line in Path(path).read_text(encoding="utf-8").splitlines() if Path(path).exists() else []:
        try:
            entry = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(entry, dict) and entry.get("kind") in {"claim", "precondition"}:
            entries.append(entry)
    return entries


EXCEPTION_LINE = re.compile(r"^[A-Za-z_][\w.]*(Error|Exception|Exit|Interrupt)\b(:.*)?$")


def summarize(text: str, limit: int = 300) -> str:
    """One line of a failure: its last exception line (nbval's reports end with it), else its
    first."""
    lines = [re.sub(r"^E\s+", "", s.strip()) for s in strip_ansi(text or "").splitlines()]
    lines = [s for s in lines if s and s != "Notebook cell execution failed"]
    exceptions = [s for s in lines if EXCEPTION_LINE.match(s)]
    line = exceptions[-1] if exceptions else (lines or [""])[0]
    return line if len(line) <= limit else line[: limit - 3] + "..."


def parse_junit(path: Path) -> list[dict]:
    """Each test case of a JUnit XML file: id, name, outcome, message, properties (the
    "not_validated" ones a grading test records); none from a file a stop cut short."""
    try:
        root = ET.parse(path).getroot()
    except (OSError, ET.ParseError):
        return []
    cases = []
    for case in root.iter("testcase"):
        outcome, message = "passed", ""
        for kind, name in (("failure", "failed"), ("error", "error"), ("skipped", "skipped")):
            found = case.find(kind)
            if found is not None:
                text = found.get("message") or ""
                outcome = name
                message = summarize(text if kind == "skipped" else f"{found.text or ''}\n{text}")
                break
        name, classname = case.get("name", ""), case.get("classname", "")
        said = [p.get("value") for p in case.iter("property") if p.get("name") == "not_validated"]
        found = dict(name=name, outcome=outcome, message=message, not_validated=said)
        cases.append({"id": f"{classname}::{name}" if classname else name, **found})
    return cases


def doctor_report() -> dict:
    """`python -m gpucourse doctor --json` in a child process (it exits 1 on an error)."""
    command = [sys.executable, "-m", "gpucourse", "doctor", "--json"]
    done = subprocess.run(command, cwd=ROOT, env=child_env(), capture_output=True, text=True)
    try:
        return json.loads(done.stdout)
    except json.JSONDecodeError:  # it crashed: preflight.cuda_problem says so
        return {"facts": {}, "findings": [], "error": (done.stderr or done.stdout)[-2000:]}


def versions() -> dict:
    """The tools' versions, the date and the checkout's commit (a kit's copy has no .git: the
    commit its KIT.json names)."""
    found = {"date": time.strftime("%Y-%m-%d %H:%M %Z"), "executable": sys.executable}
    for name in ("pytest", "nbval", "nbgrader", "nvidia-ml-py"):
        try:
            found[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            found[name] = "not installed"
    kit, commit = ROOT / "KIT.json", None
    if kit.exists():  # a kit's copy of the project
        commit = f"{json.loads(kit.read_text()).get('commit')} (the kit's; the copy has no .git)"
    elif shutil.which("git"):
        head, changed = (
            subprocess.run(["git", "-C", str(ROOT), *args], capture_output=True, text=True).stdout
            for args in (["rev-parse", "--short", "HEAD"], ["status", "--porcelain"])
        )
        if head.strip():
            commit = head.strip() + (" (with uncommitted changes)" if changed.strip() else "")
    return {**found, "commit": commit or "unknown: no .git and no KIT.json"}
