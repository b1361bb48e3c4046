"""The runs the report is built from: a lesson under nbval with its claims file, pytest, the doctor,
the bench.

Each lesson's kernel starts with the runner's IPython start-up file, kernel_startup.py: a false
claim is recorded and its cell goes on (GPUCOURSE_CLAIMS_DEFER=1); in a CPU rehearsal
(GPUCOURSE_REHEARSAL=1) each claim the lesson would check on a GPU is recorded as "not checked"."""

from __future__ import annotations

import importlib.metadata
import json
import os
import re
import shutil
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from pathlib import Path

from ..text import strip_ansi

ROOT = Path(__file__).resolve().parents[3]
REQUIRE_GPU_VAR, CLAIMS_VAR = "GPUCOURSE_REQUIRE_GPU", "GPUCOURSE_CLAIMS"
DEFER_VAR, REHEARSAL_VAR = "GPUCOURSE_CLAIMS_DEFER", "GPUCOURSE_REHEARSAL"
NEEDS = {  # what a notebook's code says when its GPU path needs it -> its name in reports
    "tensorflow": (("import_tensorflow(", "import tensorflow"), "TensorFlow"),
    "dali": (("import_dali(", "nvidia.dali"), "DALI"),
    "dali-tf": (("import_dali_tf(", "nvidia.dali.plugin.tf"), "DALI's TensorFlow plugin"),
    "two-gpus": (
        ("DistributedDataParallel", "nn.DataParallel", "torchrun", "MirroredStrategy"),
        "two GPUs",
    ),
    "compiler": (("torch.compile(",), "a C compiler"),
    "claims": (("claims.claim(", "import claim"), "the lesson's GPU claims"),
}
# A code cell belongs to the TensorFlow or DALI part of its lesson when it matches; else (the set-up
# cell too) to the PyTorch part.
PARTS = {
    "TensorFlow": re.compile(r"\btf\.|\bkeras\b|import_tensorflow\(|^\s*import tensorflow", re.M),
    "DALI": re.compile(r"\bdali\b|import_dali\(|pipeline_def|nvidia\.dali"),
}
SETUP_CELL = "# Set-up:"


def kernel_ipython_dir(artifacts: Path) -> Path:
    """An IPYTHONDIR whose default profile starts each kernel with kernel_startup.py."""
    folder = Path(artifacts) / "ipython"
    (folder / "profile_default" / "startup").mkdir(parents=True, exist_ok=True)
    shutil.copy(
        Path(__file__).with_name("kernel_startup.py"), folder / "profile_default" / "startup"
    )
    return folder


def subprocess_env(rehearsal: bool = False, **extra: str) -> dict:
    """Strict mode on (off in a rehearsal); gpucourse and coursetools from this checkout."""
    env = {
        k: v for k, v in os.environ.items() if k not in {CLAIMS_VAR, REQUIRE_GPU_VAR, REHEARSAL_VAR}
    }
    env.update({REHEARSAL_VAR: "1"} if rehearsal else {REQUIRE_GPU_VAR: "1"})
    env.update(extra)
    paths = (str(ROOT / "utils"), str(ROOT / "tools"), env.get("PYTHONPATH"))
    env["PYTHONPATH"] = os.pathsep.join(p for p in paths if p)
    return env


def code_cells(path: Path) -> list[str]:
    cells = json.loads(Path(path).read_text(encoding="utf-8")).get("cells", [])
    return ["".join(c.get("source", "")) for c in cells if c.get("cell_type") == "code"]


def notebook_uses(path: Path) -> list[str]:
    """What a notebook's code cells need on their GPU path (NEEDS' keys: "tensorflow", "two-gpus",
    ...)."""
    code = "\n".join(code_cells(path))
    return [name for name, (needles, _) in NEEDS.items() if any(n in code for n in needles)]


def cell_parts(path: Path) -> list[str]:
    """Each code cell's part of the lesson, in nbval's order ("Cell N" is the N-th code cell)."""
    return [
        "PyTorch"
        if code.lstrip().startswith(SETUP_CELL)
        else next((part for part, found in PARTS.items() if found.search(code)), "PyTorch")
        for code in code_cells(path)
    ]


def read_claims(path: Path) -> list[dict]:
    """The JSON lines gpucourse.claims wrote (claims and preconditions); a line it could not finish
    is skipped."""
    if not Path(path).exists():
        return []
    entries = []
    for line in Path(path).read_text(encoding="utf-8").splitlines():
        try:
            entry = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(entry, dict) and entry.get("kind") in {"claim", "precondition"}:
            entries.append(entry)
    return entries


EXCEPTION_LINE = re.compile(r"^[A-Za-z_][\w.]*(Error|Exception|Exit|Interrupt)\b(:.*)?$")


def summarize(text: str, limit: int = 300) -> str:
    """One line from a failure report: its last exception line (nbval's reports end with it), else
    its first."""
    lines = [
        re.sub(r"^E\s+", "", s.strip()) for s in strip_ansi(text or "").splitlines() if s.strip()
    ]
    exceptions = [line for line in lines if EXCEPTION_LINE.match(line)]
    informative = [line for line in lines if line != "Notebook cell execution failed"]
    line = exceptions[-1] if exceptions else (informative or [""])[0]
    return line if len(line) <= limit else line[: limit - 3] + "..."


def parse_junit(path: Path) -> list[dict]:
    """Each test case of a JUnit XML file: id, name, outcome, seconds, message."""
    if not Path(path).exists():
        return []
    cases = []
    for case in ET.parse(path).getroot().iter("testcase"):
        outcome, message = "passed", ""
        for kind, name in (("failure", "failed"), ("error", "error"), ("skipped", "skipped")):
            found = case.find(kind)
            if found is not None:
                text, short = found.text or "", found.get("message") or ""
                outcome, message = (
                    name,
                    summarize(short if kind == "skipped" else f"{text}\n{short}"),
                )
                break
        name, classname = case.get("name", ""), case.get("classname", "")
        cases.append(
            {
                "id": f"{classname}::{name}" if classname else name,
                "name": name,
                "outcome": outcome,
                "seconds": float(case.get("time") or 0),
                "message": message,
            }
        )
    return cases


def run_pytest(
    args: list[str], junit: Path, log: Path, timeout: float, rehearsal=False, **env
) -> dict:
    command = [sys.executable, "-m", "pytest", *args, "-p", "no:xdist", "-p", "no:cacheprovider"]
    command += ["-o", "junit_family=xunit1", f"--junitxml={junit}", "-rfEs"]
    start, timed_out = time.monotonic(), False
    with open(log, "w", encoding="utf-8") as out:
        out.write("$ " + " ".join(command) + "\n")
        out.flush()
        try:
            returncode = subprocess.run(
                command,
                cwd=ROOT,
                env=subprocess_env(rehearsal, **env),
                stdout=out,
                stderr=subprocess.STDOUT,
                timeout=timeout,
            ).returncode
        except subprocess.TimeoutExpired:
            returncode, timed_out = None, True
    return {
        "returncode": returncode,
        "timed_out": timed_out,
        "seconds": round(time.monotonic() - start, 1),
        "cases": parse_junit(junit),
        "log": str(log.relative_to(ROOT) if log.is_relative_to(ROOT) else log),
    }


def run_lesson(path: Path, artifacts: Path, timeout: float, run=None, rehearsal=False) -> dict:
    """One solution notebook under nbval, its claims in a fresh file, its kernel started by
    kernel_startup.py."""
    run = run or run_pytest
    lesson = path.parent.name
    rel = str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path)
    claims = artifacts / "claims" / f"{lesson}.jsonl"
    claims.parent.mkdir(parents=True, exist_ok=True)
    claims.unlink(missing_ok=True)
    env = {
        CLAIMS_VAR: str(claims),
        DEFER_VAR: "1",
        "IPYTHONDIR": str(kernel_ipython_dir(artifacts)),
    }
    args = [rel, "--nbval-lax", "--nbval-current-env", "--nbval-cell-timeout", str(timeout)]
    # the lesson as it ran, outputs kept, for the book (coursetools.book prefers a GPU run's)
    args += ["-p", "coursetools.executed", "--save-executed", str(artifacts / "executed-gpu")]
    junit, log = artifacts / f"{lesson}.xml", artifacts / "logs" / f"{lesson}.log"
    result = run(args, junit, log, timeout, rehearsal=rehearsal, **env)
    return {
        "notebook": rel,
        "lesson": lesson,
        "uses": notebook_uses(path),
        "parts": cell_parts(path),
        "code": "\n".join(code_cells(path)),
        **result,
        "claims": read_claims(claims),
    }


def local_facts() -> dict:
    """What the doctor does not report and the lessons' GPU paths need: a C compiler with Python's
    headers (Inductor and Triton build their launchers with them), DALI's TensorFlow plugin."""
    from .preflight import compiler_problem

    compiler = next(
        (
            shutil.which(c)
            for c in (os.environ.get("CC"), "gcc", "clang", "cc")
            if c and shutil.which(c)
        ),
        None,
    )
    names = {
        (d.metadata["Name"] or "").lower().replace("_", "-")
        for d in importlib.metadata.distributions()
    }
    return {
        "c_compiler": compiler,
        "python_headers": compiler_problem(which=lambda _: "cc") is None,
        "dali_tf_plugin": any(n.startswith("nvidia-dali-tf-plugin") for n in names),
    }


def doctor_report() -> dict:
    """``python -m gpucourse doctor --json`` in a child process (it exits 1 on an error)."""
    done = subprocess.run(
        [sys.executable, "-m", "gpucourse", "doctor", "--json"],
        cwd=ROOT,
        env=subprocess_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    try:
        return json.loads(done.stdout)
    except json.JSONDecodeError:
        return {"facts": {}, "findings": [], "error": (done.stderr or done.stdout)[-2000:]}


def run_bench(artifacts: Path, timeout: float = 600) -> dict:
    try:
        done = subprocess.run(
            [sys.executable, "-m", "gpucourse", "bench", "--json"],
            cwd=ROOT,
            env=subprocess_env(),
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        card = (
            json.loads(done.stdout)
            if done.returncode == 0
            else {"error": done.stderr.strip()[-2000:]}
        )
    except (subprocess.TimeoutExpired, json.JSONDecodeError) as exc:
        card = {"error": f"{type(exc).__name__}: {exc}"}
    (artifacts / "bench.json").write_text(json.dumps(card, indent=2) + "\n", encoding="utf-8")
    return card


def versions() -> dict:
    found = {"date": time.strftime("%Y-%m-%d %H:%M %Z"), "executable": sys.executable}
    for name in ("pytest", "nbval", "nbgrader"):
        try:
            found[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            found[name] = "not installed"
    git = ["git", "-C", str(ROOT)]
    try:
        commit = subprocess.run(
            [*git, "rev-parse", "--short", "HEAD"], capture_output=True, text=True
        )
        dirty = subprocess.run([*git, "status", "--porcelain"], capture_output=True, text=True)
        changed = " (with uncommitted changes)" if dirty.stdout.strip() else ""
        found["commit"] = (commit.stdout.strip() + changed) or _kit_commit()
    except OSError:
        found["commit"] = _kit_commit()
    return found


def _kit_commit() -> str | None:
    """A kit's project has no .git: its KIT.json says which commit it was made from."""
    kit = ROOT / "KIT.json"
    return json.loads(kit.read_text()).get("commit") if kit.exists() else None
