"""`make test-gpu`: the GPU runner's suite, and its report.

    python tools/test_gpu.py                    # check CUDA, run everything, write test-artifacts/
    python tools/test_gpu.py 04_mixed_precision # only these lessons' notebooks and grading (plus the gpu tests)
    python tools/test_gpu.py --preflight        # only the quick check (`make test-gpu` runs it first)
    python tools/test_gpu.py --setup [--wheelhouse DIR]     # add what the suite needs to this Python's environment,
                                                            # beside its PyTorch (make test-gpu ENV=system)
    python tools/test_gpu.py --download DIR [--python-version 3.12] [--platform manylinux_2_28_x86_64]
                                                            # those packages' wheels, for --setup offline (make wheelhouse)

1. Checks that this machine can run the GPU path, and stops at once, saying why
   and what to do, when it cannot (no NVIDIA driver, every GPU hidden by
   CUDA_VISIBLE_DEVICES, a CPU-only PyTorch, a driver older than PyTorch's CUDA).
   The quick check uses the standard library only, so it runs before any set-up.
2. With GPUCOURSE_REQUIRE_GPU=1 (a device choice that would fall back to the CPU
   fails instead, and so does a false claim), runs each solution notebook under
   `pytest --nbval-lax` (one pytest, one kernel, one time per notebook) with
   GPUCOURSE_CLAIMS naming a file of its own, where `gpucourse.claims` records each
   claim the lesson checks (measured value, bound, pass or fail) and each
   precondition of its GPU path (two GPUs, a C compiler, ...). Then the
   `gpu`-marked tests, then autograde on the GPU (the solutions and the wrong-answer
   fixtures, in the grading sandbox with the GPU passed through; the expected
   scores are checked), then `python -m gpucourse bench`.
3. Writes test-artifacts/gpu-report.md and gpu-report.json (and a log and a
   JUnit XML per run): device, driver, versions, each lesson's time, its claims
   with their measured values, its result, and what was NOT validated on GPU and
   why: an unmet precondition the lesson recorded, TensorFlow or DALI missing or
   without GPU support, DALI's TensorFlow plugin missing, fewer than two GPUs for
   DDP, no C compiler for Inductor, claims that never ran, gpu tests that skipped.
   A lesson with such a part is "not validated", never "passed"; a failed claim
   fails its lesson. In the GPU set (`make` installs it where nvidia-smi lists a
   GPU) TensorFlow not seeing the GPU is a failure.

Exit status: 0 when everything that ran passed (1 with --require-all if a part
was not validated on GPU), 1 when something failed, 2 when nothing could run.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import time
import xml.etree.ElementTree as ET
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
REQUIRE_GPU_VAR, CLAIMS_VAR = "GPUCOURSE_REQUIRE_GPU", "GPUCOURSE_CLAIMS"
NEEDS = {  # what a notebook's code says when its GPU path needs it -> its name in reports
    "tensorflow": (("import_tensorflow(", "import tensorflow"), "TensorFlow"),
    "dali": (("import_dali(", "nvidia.dali"), "DALI"),
    "dali-tf": (("import_dali_tf(", "nvidia.dali.plugin.tf"), "DALI's TensorFlow plugin"),
    "two-gpus": (("DistributedDataParallel", "nn.DataParallel", "torchrun", "MirroredStrategy"), "two GPUs"),
    "compiler": (("torch.compile(",), "a C compiler"),
    "claims": (("claims.claim(", "import claim"), "the lesson's GPU claims"),
}
FRAMEWORKS = ("tensorflow", "dali")
GRADING = "autograde"  # the gpu tests whose name holds this are the grading run (tests/test_gpu.py)
# The suite's own packages, added beside an existing PyTorch (--setup) or gathered as wheels (--download), at the
# course's pins (pyproject.toml); setuptools only for a wheelhouse's users who build gpucourse themselves.
SUITE = ("numpy", "pillow", "matplotlib", "tqdm", "nvidia-ml-py", "pytest", "nbval", "ipykernel", "nbformat",
         "nbclient", "nbgrader")
# Present distributions --setup never replaces: pinned at their versions in pip's constraints.
KEEP = re.compile(r"(torch|torchvision|torchaudio|triton|pytorch-triton.*|nvidia-(?!ml-py).*|tensorflow.*|tf-keras|keras"
                  r"|jax|jaxlib|tensorrt.*|cupy.*|numpy)")
CPU_ADVICE = "This machine can run the CPU suite: `make test`. `python -m gpucourse doctor` explains what it sees."


# ----------------------------------------------------------------- preflight
def nvml_gpus() -> tuple[int | None, str]:
    """(number of GPUs the NVIDIA driver lists, "") or (None, why not), through NVML with ctypes only."""
    import ctypes

    names = ["nvml.dll"] if sys.platform == "win32" else ["libnvidia-ml.so.1", "libnvidia-ml.so"]
    error = ""
    for name in names:
        try:
            lib = ctypes.CDLL(name)
            break
        except OSError as exc:
            error = error or str(exc)
    else:
        return None, f"the NVIDIA driver's management library cannot be loaded ({error})"
    status = (getattr(lib, "nvmlInit_v2", None) or lib.nvmlInit)()
    if status != 0:
        return None, f"the NVIDIA driver does not start (nvmlInit returned error {status})"
    count = ctypes.c_uint(0)
    try:
        status = lib.nvmlDeviceGetCount_v2(ctypes.byref(count))
    finally:
        lib.nvmlShutdown()
    return (count.value, "") if status == 0 else (None, f"nvmlDeviceGetCount returned error {status}")


def quick_problem(environ=os.environ, nvml=nvml_gpus) -> tuple[str, str] | None:
    """(why, what to do) when this machine plainly cannot run the GPU path; None when it may."""
    visible = environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None and visible.strip() in {"", "-1"}:
        return (f"CUDA_VISIBLE_DEVICES={visible!r} hides every GPU from CUDA",
                "unset it (`unset CUDA_VISIBLE_DEVICES`) or name the GPU to test, e.g. CUDA_VISIBLE_DEVICES=0")
    count, error = nvml()
    if count is None:
        return (f"no NVIDIA driver: {error}",
                "run `make test-gpu` on a machine with an NVIDIA GPU and its driver (`nvidia-smi` must list the card)")
    if count == 0:
        return "the NVIDIA driver is loaded but lists no GPU", "check `nvidia-smi`, then run this again"
    return None


def cuda_problem(report: dict, python: str = sys.executable) -> tuple[str, str] | None:
    """(why, what to do) when PyTorch cannot use CUDA, from ``python -m gpucourse doctor --json``'s report."""
    facts = report.get("facts") or {}
    torch_ = facts.get("torch") or {}
    if not torch_.get("installed"):
        return (f"PyTorch is not installed for {python}",
                "`make test-gpu` sets up .venv with the course environment; or install torch into this Python")
    if torch_.get("error"):
        return f"PyTorch fails to import: {torch_['error']}", "reinstall it; `python -m gpucourse doctor` has details"
    if not torch_.get("cuda"):
        return (f"PyTorch {torch_.get('version')} is a CPU-only build",
                "install a CUDA build of PyTorch (the command at https://pytorch.org/get-started/locally/)")
    if not torch_.get("cuda_available"):
        errors = [f for f in report.get("findings") or [] if f.get("level") == "error"]
        if errors:
            return errors[0]["problem"], errors[0].get("fix") or "see `python -m gpucourse doctor`"
        return "PyTorch sees no CUDA device (torch.cuda.is_available() is False)", "see `python -m gpucourse doctor`"
    return None


def stop_message(problem: tuple[str, str]) -> str:
    why, fix = problem
    return ("make test-gpu: stopped before running anything: this machine cannot run the GPU path.\n"
            f"  why: {why}.\n  what to do: {fix}.\n  {CPU_ADVICE}")


# --------------------------------------------------------------------- runs
def subprocess_env(**extra: str) -> dict:
    """Strict mode on, and gpucourse importable from this checkout even where it is not installed."""
    env = {k: v for k, v in os.environ.items() if k != CLAIMS_VAR}
    env.update({REQUIRE_GPU_VAR: "1", **extra})
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT / "utils"), env.get("PYTHONPATH")) if p)
    return env


def notebook_uses(path: Path) -> list[str]:
    """What a notebook's code cells need on their GPU path (keys of NEEDS: "tensorflow", "two-gpus", "claims", ...)."""
    cells = json.loads(Path(path).read_text(encoding="utf-8")).get("cells", [])
    code = "\n".join("".join(c.get("source", "")) for c in cells if c.get("cell_type") == "code")
    return [name for name, (needles, _) in NEEDS.items() if any(n in code for n in needles)]


def read_claims(path: Path) -> list[dict]:
    """The JSON lines gpucourse.claims wrote (claims and preconditions); a line it could not finish is skipped."""
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


def local_facts() -> dict:
    """What the doctor does not report and the lessons' GPU paths need: a C compiler with Python's headers (Inductor
    and Triton build their launchers with them), DALI's TensorFlow plugin."""
    compiler = next((shutil.which(c) for c in (os.environ.get("CC"), "gcc", "clang", "cc") if c and shutil.which(c)), None)
    names = {(d.metadata["Name"] or "").lower().replace("_", "-") for d in importlib.metadata.distributions()}
    return {"c_compiler": compiler, "python_headers": (Path(sysconfig.get_paths()["include"]) / "Python.h").exists(),
            "dali_tf_plugin": any(n.startswith("nvidia-dali-tf-plugin") for n in names)}


ANSI = re.compile(r"(\x1b|#x1B)\[[0-9;]*m")
EXCEPTION_LINE = re.compile(r"^[A-Za-z_][\w.]*(Error|Exception|Exit|Interrupt)\b(:.*)?$")


def summarize(text: str, limit: int = 300) -> str:
    """One line from a failure report: its last exception line (nbval's reports end with it), else its first line."""
    lines = [re.sub(r"^E\s+", "", line.strip()) for line in ANSI.sub("", text or "").splitlines() if line.strip()]
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
        for kind in ("failure", "error", "skipped"):
            found = case.find(kind)
            if found is not None:
                outcome = {"failure": "failed", "error": "error", "skipped": "skipped"}[kind]
                text, short = found.text or "", found.get("message") or ""
                message = summarize(short if kind == "skipped" else f"{text}\n{short}")
                break
        name, classname = case.get("name", ""), case.get("classname", "")
        cases.append({"id": f"{classname}::{name}" if classname else name, "name": name, "outcome": outcome,
                      "seconds": float(case.get("time") or 0), "message": message})
    return cases


def run_pytest(args: list[str], junit: Path, log: Path, timeout: float, **env: str) -> dict:
    command = [sys.executable, "-m", "pytest", *args, "-p", "no:xdist", "-o", "junit_family=xunit1",
               f"--junitxml={junit}", "-rfEs"]
    start, timed_out = time.monotonic(), False
    with open(log, "w", encoding="utf-8") as out:
        out.write("$ " + " ".join(command) + "\n")
        out.flush()
        try:
            returncode = subprocess.run(command, cwd=ROOT, env=subprocess_env(**env), stdout=out,
                                        stderr=subprocess.STDOUT, timeout=timeout).returncode
        except subprocess.TimeoutExpired:
            returncode, timed_out = None, True
    return {"returncode": returncode, "timed_out": timed_out, "seconds": round(time.monotonic() - start, 1),
            "cases": parse_junit(junit), "log": str(log.relative_to(ROOT) if log.is_relative_to(ROOT) else log)}


def doctor_report() -> dict:
    """``python -m gpucourse doctor --json`` in a child process (it exits 1 when it finds an error)."""
    done = subprocess.run([sys.executable, "-m", "gpucourse", "doctor", "--json"], cwd=ROOT, env=subprocess_env(),
                          capture_output=True, text=True, timeout=300)
    try:
        return json.loads(done.stdout)
    except json.JSONDecodeError:
        return {"facts": {}, "findings": [], "error": (done.stderr or done.stdout)[-2000:]}


def run_bench(artifacts: Path, timeout: float = 600) -> dict:
    try:
        done = subprocess.run([sys.executable, "-m", "gpucourse", "bench", "--json"], cwd=ROOT, env=subprocess_env(),
                              capture_output=True, text=True, timeout=timeout)
        card = json.loads(done.stdout) if done.returncode == 0 else {"error": done.stderr.strip()[-2000:]}
    except (subprocess.TimeoutExpired, json.JSONDecodeError) as exc:
        card = {"error": f"{type(exc).__name__}: {exc}"}
    (artifacts / "bench.json").write_text(json.dumps(card, indent=2) + "\n", encoding="utf-8")
    return card


# ------------------------------------------------------------------- report
def need_status(facts: dict) -> dict[str, str | None]:
    """For each need of NEEDS bar "claims" (which depends on the run): None when this machine meets it, else why not."""
    status: dict[str, str | None] = {}
    for name in FRAMEWORKS:
        info = facts.get(name) or {}
        if not info.get("installed"):
            status[name] = "not installed"
        elif info.get("error"):
            status[name] = f"fails to import ({info['error']})"
        elif name == "tensorflow" and not info.get("gpus"):
            build = "a CPU-only build" if info.get("is_cuda_build") is False else "no CUDA libraries"
            status[name] = f"installed without GPU support: {build}; the GPU set has them (`make test-gpu GPU=1`)"
        else:
            status[name] = None
    framework = next((f"{NEEDS[n][1]} {status[n]}" for n in ("dali", "tensorflow") if status[n]), None)
    status["dali-tf"] = framework or (None if facts.get("dali_tf_plugin") else (
        "not installed: it compiles against TensorFlow (`pip install --no-build-isolation "
        "nvidia-dali-tf-plugin-cuda120==<DALI's version>`; `make` tries it, best effort)"))
    gpus = len((facts.get("torch") or {}).get("devices") or [])
    status["two-gpus"] = None if gpus >= 2 else (
        f"{gpus} GPU visible to PyTorch: NCCL, DDP and DataParallel across GPUs did not run (gloo on the CPU instead)")
    missing = [what for what, ok in (("C compiler ($CC, gcc or clang)", facts.get("c_compiler")),
                                     ("Python's headers (Python.h)", facts.get("python_headers"))) if not ok]
    status["compiler"] = (f"no {' and no '.join(missing)}: Inductor and Triton build their kernels' launchers with them"
                          if missing else None)
    return status


def framework_status(facts: dict) -> dict[str, str | None]:
    """For TensorFlow and DALI: None when validated on the GPU, else why not."""
    status = need_status(facts)
    return {name: status[name] for name in FRAMEWORKS}


def _environment(facts: dict, versions: dict) -> dict:
    driver, torch_ = facts.get("driver") or {}, facts.get("torch") or {}
    devices = torch_.get("devices") or []
    gpu = next((g for g in driver.get("gpus") or [] if devices and g.get("name") == devices[0]), None)

    def framework(key: str) -> str:
        info = facts.get(key) or {}
        if not info.get("installed"):
            return "not installed"
        seen = f", sees {info['gpus']} GPU(s)" if "gpus" in info else ""
        return f"{info.get('version')}{seen}" + (f" (error: {info['error']})" if info.get("error") else "")

    return {
        "device": devices[0] if devices else None, "gpus_visible": len(devices),
        "compute_capability": gpu and gpu.get("compute_capability"),
        "memory_gib": gpu and gpu.get("memory_gib"),
        "gpus_on_machine": len(driver.get("gpus") or []),
        "driver": driver.get("version"), "driver_cuda": driver.get("cuda"),
        "torch": torch_.get("version"), "torch_cuda": torch_.get("cuda"), "cudnn": torch_.get("cudnn"),
        "tensorflow": framework("tensorflow"), "dali": framework("dali"),
        "dali_tf_plugin": facts.get("dali_tf_plugin"), "c_compiler": facts.get("c_compiler"),
        "python": facts.get("python"), "platform": facts.get("platform"), "gpucourse": facts.get("gpucourse"),
        "cuda_visible_devices": facts.get("cuda_visible_devices"), **versions,
    }


def _claim_line(entry: dict) -> str:
    return (f"{entry.get('claim')}: {entry.get('measured'):.3g}{entry.get('unit') or ''}, expected {entry.get('bound')}"
            if isinstance(entry.get("measured"), (int, float)) else f"{entry.get('claim')}: expected {entry.get('bound')}")


def build_report(facts: dict, notebooks: list[dict], gpu_tests: dict | None, bench: dict | None,
                 versions: dict | None = None, grading: dict | None = None) -> dict:
    """The report (plain data) from the runs' results. Pure: tested on a CPU with made-up results.

    ``notebooks``: {"notebook", "uses" (notebook_uses), "claims" (read_claims), and run_pytest's "returncode",
    "timed_out", "seconds", "cases"}; ``gpu_tests`` and ``grading``: run_pytest's results; ``bench``: the bench
    card or {"error": ...}; ``facts``: doctor's facts with local_facts().
    """
    status = need_status(facts)
    unvalidated: dict[tuple[str, str], list[str]] = {}  # (what, why) -> where
    rows = []
    for nb in notebooks:
        bad = [c for c in nb.get("cases", []) if c["outcome"] in {"failed", "error"}]
        entries = nb.get("claims", [])
        claims = [e for e in entries if e["kind"] == "claim"]
        false = [e for e in claims if not e.get("passed")]
        missing = [(NEEDS[n][1], status[n]) for n in nb.get("uses", []) if status.get(n)]
        missing += [(e.get("what", "?"), e.get("why") or "not met on this machine")
                    for e in entries if e["kind"] == "precondition" and not e.get("met")]
        if "claims" in nb.get("uses", []) and not claims:
            missing.append((NEEDS["claims"][1], "none ran on the GPU: no claim was recorded"))
        for what, why in missing:
            unvalidated.setdefault((what, why), []).append(nb["notebook"])
        if nb.get("timed_out"):
            result = "timeout"
        elif bad or false or nb.get("returncode") != 0 or not nb.get("cases"):
            result = "failed"
        else:
            result = "not validated" if missing else "passed"
        rows.append({"notebook": nb["notebook"], "result": result, "seconds": nb.get("seconds"),
                     "cells": len(nb.get("cases", [])), "failed_cells": [f"{c['name']}: {c['message']}" for c in bad],
                     "claims": [{k: e.get(k) for k in ("claim", "measured", "unit", "bound", "passed", "device", "source")}
                                for e in claims],
                     "failed_claims": [_claim_line(e) for e in false],
                     "not_validated_on_gpu": [f"{what} ({why})" for what, why in missing], "log": nb.get("log")})
    not_validated = [{"what": what, "why": why, "where": where} for (what, why), where in unvalidated.items()]

    def pytest_part(run: dict | None, label: str) -> dict | None:
        if run is None:
            return None
        cases = run.get("cases", [])
        failed = [f"{c['id']}: {c['message']}" for c in cases if c["outcome"] in {"failed", "error"}]
        skipped = [c for c in cases if c["outcome"] == "skipped"]
        passed = sum(c["outcome"] == "passed" for c in cases)
        ok = run.get("returncode") == 0 and not run.get("timed_out") and passed > 0
        if run.get("timed_out"):
            failed.append(f"the {label} timed out")
        elif not cases:
            failed.append(f"no {label} ran (pytest exit status {run.get('returncode')})")
        for c in skipped:
            not_validated.append({"what": f"{label}: {c['id']}", "why": f"skipped: {c['message']}", "where": []})
        return {"result": "passed" if ok and not failed else "failed", "passed": passed, "failed": failed,
                "skipped": [f"{c['id']}: {c['message']}" for c in skipped], "seconds": run.get("seconds"),
                "cases": [{k: c[k] for k in ("name", "outcome", "seconds", "message")} for c in cases],
                "log": run.get("log")}

    tests, graded = pytest_part(gpu_tests, "gpu test"), pytest_part(grading, "grading on the GPU")
    problems = [f"{r['notebook']}: {r['result']}" + (f" (claim false: {r['failed_claims'][0]})" if r["failed_claims"] else "")
                for r in rows if r["result"] in {"failed", "timeout"}]
    tf = facts.get("tensorflow") or {}
    if facts.get("course_set") == "gpu" and tf.get("installed") and not tf.get("error") and not tf.get("gpus"):
        problems.append("TensorFlow sees no GPU, though the GPU set installs its CUDA libraries: `python -m gpucourse doctor`")
    for part, label in ((tests, "gpu tests"), (graded, "grading on the GPU")):
        if part and part["result"] != "passed":
            problems.append(f"{label}: failed")
    if bench is not None and "error" in bench:
        problems.append(f"bench: {bench['error'][-300:]}")
    overall = "failed" if problems else "partial" if not_validated else "passed"
    return {"status": overall, "problems": problems, "environment": _environment(facts, versions or {}),
            "notebooks": rows, "gpu_tests": tests, "grading": graded, "not_validated_on_gpu": not_validated,
            "bench": bench}


def _cell(text) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def render_markdown(report: dict) -> str:
    env = report["environment"]
    headline = {"passed": "PASSED: every lesson, claim, gpu test and grading run passed on the GPU",
                "partial": "PASSED WHAT RAN, but some parts were NOT VALIDATED ON GPU (below)",
                "failed": "FAILED"}[report["status"]]
    lines = [f"# GPU test report: {headline}", "",
             f"- device: {env.get('device')} (compute capability {env.get('compute_capability')}, "
             f"{env.get('memory_gib')} GiB; {env.get('gpus_visible')} visible to PyTorch, "
             f"{env.get('gpus_on_machine')} on the machine, CUDA_VISIBLE_DEVICES={env.get('cuda_visible_devices')})",
             f"- NVIDIA driver {env.get('driver')} (CUDA {env.get('driver_cuda')}); PyTorch {env.get('torch')} "
             f"(CUDA {env.get('torch_cuda')}, cuDNN {env.get('cudnn')})",
             f"- TensorFlow: {env.get('tensorflow')}; DALI: {env.get('dali')}; DALI's TensorFlow plugin: "
             f"{'installed' if env.get('dali_tf_plugin') else 'not installed'}; C compiler: {env.get('c_compiler')}",
             f"- Python {env.get('python')} ({env.get('executable')}) on {env.get('platform')}; gpucourse "
             f"{env.get('gpucourse')}, pytest {env.get('pytest')}, nbval {env.get('nbval')}, nbgrader {env.get('nbgrader')}",
             f"- commit {env.get('commit')}; {env.get('date')}",
             f"- strict mode: {REQUIRE_GPU_VAR}=1 (no CPU fallback; a false claim fails its lesson)", ""]
    if report["problems"]:
        lines += ["## Problems", *[f"- {p}" for p in report["problems"]], ""]
    lines += ["## Lessons (`pytest --nbval-lax`, claims checked by `gpucourse.claims`)", "",
              "| notebook | result | time | claims passed | not validated on GPU |", "|---|---|---|---|---|"]
    for row in report["notebooks"]:
        claims = f"{sum(bool(c['passed']) for c in row['claims'])}/{len(row['claims'])}" if row["claims"] else "-"
        missing = _cell(", ".join(row["not_validated_on_gpu"]) or "-")
        lines.append(f"| {row['notebook']} | {row['result']} | {row['seconds']} s | {claims} | {missing} |")
    for row in report["notebooks"]:
        if row["failed_cells"]:
            more = len(row["failed_cells"]) - 1
            later = f" (and {more} later cell(s); log: {row['log']})" if more else f" (log: {row['log']})"
            lines.append(f"\n{row['notebook']}: first failure {row['failed_cells'][0]}{later}")
        for claim in row["failed_claims"]:
            lines.append(f"\n{row['notebook']}: claim FAILED: {claim}")
    claimed = [(row["notebook"], c) for row in report["notebooks"] for c in row["claims"]]
    if claimed:
        lines += ["", "## Claims checked on the GPU", "", "| notebook | claim | measured | expected | result | source |",
                  "|---|---|---|---|---|---|"]
        for notebook, c in claimed:
            measured = f"{c['measured']:.4g}{c.get('unit') or ''}" if isinstance(c["measured"], (int, float)) else "-"
            lines.append(f"| {notebook} | {_cell(c['claim'])} | {measured} | {_cell(c['bound'])} | "
                         f"{'PASS' if c['passed'] else 'FAIL'} | {_cell(c.get('source') or '-')} |")
    lines += ["", "## Not validated on GPU", ""]
    lines += [f"- {item['what']}: {item['why']}" + (f" ({', '.join(item['where'])})" if item["where"] else "")
              for item in report["not_validated_on_gpu"]] or ["- nothing: every part ran on the GPU"]
    for key, title in (("grading", "Grading on the GPU (nbgrader autograde in the sandbox, expected scores)"),
                       ("gpu_tests", "gpu-marked tests")):
        part = report.get(key)
        if part:
            lines += ["", f"## {title}: {part['result']}", "",
                      f"{part['passed']} passed, {len(part['failed'])} failed, {len(part['skipped'])} skipped "
                      f"in {part['seconds']} s", *[f"- FAILED {t}" for t in part["failed"]],
                      *[f"- skipped {t}" for t in part["skipped"]]]
    bench = report.get("bench")
    if bench and "rows" in bench:
        lines += ["", f"## Bench: {bench.get('name')} ({bench.get('known_as') or 'no published peaks'})", "",
                  "| measurement | value | peak | of peak |", "|---|---|---|---|"]
        for row in bench["rows"]:
            value = "-" if row["value"] is None else f"{row['value']:.4g} {row['unit']}"
            ratio = "-" if row["ratio"] is None else f"{row['ratio']:.0%}"
            lines.append(f"| {row['what']} | {value} | {row['peak'] or '-'} | {ratio} |")
    return "\n".join(lines) + "\n"


def _versions() -> dict:
    versions = {"date": time.strftime("%Y-%m-%d %H:%M %Z"), "executable": sys.executable}
    for name in ("pytest", "nbval", "nbgrader"):
        try:
            versions[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            versions[name] = "not installed"
    try:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True)
        dirty = subprocess.run(["git", "status", "--porcelain"], cwd=ROOT, capture_output=True, text=True)
        versions["commit"] = commit.stdout.strip() + (" (with uncommitted changes)" if dirty.stdout.strip() else "")
    except OSError:
        versions["commit"] = None
    return versions


# -------------------------------------------------------- an existing environment
def course_pins(pyproject: Path = ROOT / "pyproject.toml") -> dict[str, str]:
    """name -> version of the `course` extra's exact pins without a marker (a regex: any Python can run this)."""
    text = Path(pyproject).read_text(encoding="utf-8")
    block = re.search(r"^course = \[(.*?)^\]", text, flags=re.M | re.S)
    return {name.lower(): version for name, version in re.findall(r'"([A-Za-z0-9_.\-]+)==([^";\s]+)"', block.group(1))}


def suite_requirements(pins: dict[str, str] | None = None) -> list[str]:
    """What the GPU suite adds beside PyTorch, at the course's pins: the small packages, nbval and its kernel stack,
    nbgrader for grading on the GPU (their own dependencies come with them; none of them needs torch)."""
    pins = course_pins() if pins is None else pins
    return [f"{name}=={pins[name]}" for name in SUITE]


def _canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def installed_distributions() -> dict[str, str]:
    """This Python's distributions, name -> version (the first one on sys.path wins, as imports do)."""
    found: dict[str, str] = {}
    for dist in importlib.metadata.distributions():
        if dist.metadata["Name"]:
            found.setdefault(_canonical(dist.metadata["Name"]), dist.version)
    return found


def setup_plan(installed: dict[str, str], requirements: list[str], wheelhouse: str | None = None,
               python: str = sys.executable) -> tuple[list[list[str]], str]:
    """The pip command adding the requirements this environment lacks (none: no command), and the constraints that
    keep its PyTorch, TensorFlow, CUDA libraries and NumPy at their present versions."""
    missing = [r for r in requirements if _canonical(re.split(r"[=<>!~;\[ ]", r, maxsplit=1)[0]) not in installed]
    constraints = "".join(f"{name}=={version}\n" for name, version in sorted(installed.items()) if KEEP.fullmatch(name))
    index = ["--no-index", "--find-links", str(wheelhouse)] if wheelhouse else []
    commands = [[python, "-m", "pip", "install", *index, "--constraint", "{constraints}", *missing]] if missing else []
    return commands, constraints


def setup(wheelhouse: str | None = None, requirements: list[str] | None = None) -> int:
    """Add what the suite needs to this Python's environment, beside its PyTorch and never replacing it."""
    before = installed_distributions()
    if "torch" not in before:
        print(f"{sys.executable} has no PyTorch: `make test-gpu ENV=system` (or PYTHON=...) needs a Python whose "
              "environment has a CUDA PyTorch; without ENV and PYTHON, `make test-gpu` builds .venv instead.", file=sys.stderr)
        return 2
    if wheelhouse and not Path(wheelhouse).is_dir():
        print(f"the wheelhouse {wheelhouse} is not a folder: `make wheelhouse WHEELHOUSE={wheelhouse}` makes it", file=sys.stderr)
        return 2
    commands, constraints = setup_plan(before, suite_requirements() if requirements is None else requirements, wheelhouse)
    with tempfile.TemporaryDirectory(prefix="gpucourse-setup-") as tmp:
        (Path(tmp) / "constraints.txt").write_text(constraints, encoding="utf-8")
        for command in commands:
            command = [str(Path(tmp) / "constraints.txt") if part == "{constraints}" else part for part in command]
            print("$ " + " ".join(command), flush=True)
            if subprocess.run(command).returncode != 0:
                offline = " (offline: is every wheel in the wheelhouse?)" if wheelhouse else ""
                print(f"make test-gpu: adding the suite's packages failed; this environment's PyTorch {before['torch']} "
                      f"is kept as it is{offline}.", file=sys.stderr)
                return 1
    spec = importlib.util.find_spec("gpucourse")
    if spec is None:  # gpucourse from this checkout, as an editable install adds it, with nothing to build or download
        try:
            (Path(sysconfig.get_paths()["purelib"]) / "gpucourse-checkout.pth").write_text(f"{ROOT / 'utils'}\n")
        except OSError as error:
            print(f"cannot add gpucourse to {sys.executable}'s environment ({error}); a read-only site install can "
                  "be extended by a venv: `python -m venv --system-site-packages ENV`, then PYTHON=ENV/bin/python",
                  file=sys.stderr)
            return 2
    elif Path(spec.origin or "").parent.parent != ROOT / "utils":
        print(f"note: the gpucourse at {spec.origin} is not this checkout's; the grading run imports that one")
    after = installed_distributions()
    kept = {n: (v, after.get(n)) for n, v in before.items() if KEEP.fullmatch(n) and after.get(n) != v}
    added = sorted(set(after) - set(before))
    print(f"added {len(added)} package(s) ({', '.join(added) or 'none missing'}) beside PyTorch {after.get('torch')}"
          + (f"; CHANGED, though pinned: {kept}" if kept else "; PyTorch and its CUDA libraries are as they were"))
    return 1 if kept else 0


def platforms(platform: str) -> list[str]:
    """``platform`` and the older ones a machine of that platform runs: pip takes `manylinux_2_28_x86_64` literally
    (it widens only `manylinux2014_*` and `manylinux2010_*`), while most wheels are `manylinux2014` (glibc 2.17)."""
    found = re.fullmatch(r"manylinux_2_(\d+)_(\w+)", platform)
    if not found:
        return [platform]
    glibc, arch = int(found.group(1)), found.group(2)
    legacy = {17: "manylinux2014", 12: "manylinux2010", 5: "manylinux1"}
    return [f"manylinux_2_{minor}_{arch}" for minor in range(glibc, 4, -1)] + [
        f"{name}_{arch}" for minor, name in legacy.items() if minor <= glibc]


def download_command(dest: str, python_version: str | None = None, platform: str | None = None,
                     requirements: list[str] | None = None) -> list[str]:
    """`pip download` of the suite's wheels (and theirs) for a Python version and platform, binary only."""
    target = ["--python-version", python_version] if python_version else []
    for name in platforms(platform) if platform else []:
        target += ["--platform", name]
    return [sys.executable, "-m", "pip", "download", "--only-binary=:all:", "--dest", str(dest), *target,
            *(suite_requirements() if requirements is None else requirements)]


# --------------------------------------------------------------------- main
def run_lesson(path: Path, artifacts: Path, timeout: float, run=None) -> dict:
    """One solution notebook under nbval, with GPUCOURSE_CLAIMS naming a fresh file for its claims; its result."""
    run = run or run_pytest
    lesson = path.parent.name
    rel = str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path)
    claims = artifacts / "claims" / f"{lesson}.jsonl"
    claims.parent.mkdir(parents=True, exist_ok=True)
    claims.unlink(missing_ok=True)
    result = run([rel, "--nbval-lax", "--nbval-current-env", "--nbval-cell-timeout", str(timeout)],
                 artifacts / f"{lesson}.xml", artifacts / "logs" / f"{lesson}.log", timeout, **{CLAIMS_VAR: str(claims)})
    return {"notebook": rel, "uses": notebook_uses(path), **result, "claims": read_claims(claims)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("lessons", nargs="*", help="lesson folders to run (default: every one in solutions/)")
    parser.add_argument("--preflight", action="store_true", help="only the quick check (standard library only)")
    parser.add_argument("--artifacts", type=Path, default=ROOT / "test-artifacts", help="where the report goes")
    parser.add_argument("--timeout", type=float, default=1800, help="seconds per notebook (and for the gpu tests)")
    parser.add_argument("--grading-timeout", type=float, default=3600, help="seconds for grading every lesson")
    parser.add_argument("--no-grading", action="store_true", help="skip autograde on the GPU")
    parser.add_argument("--require-all", action="store_true", help="fail when a part is not validated on GPU")
    parser.add_argument("--setup", action="store_true", help="add what the suite needs beside this Python's PyTorch")
    parser.add_argument("--wheelhouse", help="with --setup: install offline, from this folder of wheels")
    parser.add_argument("--requirements", type=Path, help="with --setup or --download: these instead of the suite's")
    parser.add_argument("--download", metavar="DIR", help="gather the suite's wheels in DIR (make wheelhouse)")
    parser.add_argument("--python-version", help="with --download: for this Python, e.g. 3.12")
    parser.add_argument("--platform", help="with --download: for this platform, e.g. manylinux_2_28_x86_64")
    args = parser.parse_args(argv)

    requirements = None
    if args.requirements:
        requirements = [line.strip() for line in args.requirements.read_text().splitlines()
                        if line.strip() and not line.startswith("#")]
    if args.download:
        command = download_command(args.download, args.python_version, args.platform, requirements)
        print("$ " + " ".join(command), flush=True)
        return subprocess.run(command).returncode
    if args.setup:
        return setup(args.wheelhouse, requirements)

    problem, doctor = quick_problem(), {}
    if problem is None and not args.preflight:
        doctor = doctor_report()
        problem = cuda_problem(doctor)
    if problem is not None:
        print(stop_message(problem), file=sys.stderr)
        return 2
    if args.preflight:
        return 0

    notebooks = sorted((ROOT / "solutions").glob("*/*.ipynb"))
    if args.lessons:
        notebooks = [nb for nb in notebooks if nb.parent.name in args.lessons]
        unknown = set(args.lessons) - {nb.parent.name for nb in notebooks}
        if unknown:
            print(f"unknown lesson(s): {', '.join(sorted(unknown))}", file=sys.stderr)
            return 2
    artifacts = args.artifacts.resolve()
    (artifacts / "logs").mkdir(parents=True, exist_ok=True)
    facts = {**(doctor.get("facts") or {}), **local_facts()}
    results = []
    print(f"{REQUIRE_GPU_VAR}=1; {len(notebooks)} notebook(s), then the gpu tests, grading, the bench. Logs: {artifacts}")
    for i, path in enumerate(notebooks, 1):
        print(f"[{i}/{len(notebooks)}] {path.relative_to(ROOT)} ...", end=" ", flush=True)
        results.append(run_lesson(path, artifacts, args.timeout))
        claims = [e for e in results[-1]["claims"] if e["kind"] == "claim"]
        print(f"exit {results[-1]['returncode']}, {results[-1]['seconds']} s, "
              f"{sum(bool(e.get('passed')) for e in claims)}/{len(claims)} claims passed")
    print("gpu-marked tests ...", end=" ", flush=True)
    gpu_tests = run_pytest(["tests", "-m", "gpu", "-k", f"not {GRADING}"], artifacts / "gpu-tests.xml",
                           artifacts / "logs" / "gpu-tests.log", args.timeout)
    print(f"exit {gpu_tests['returncode']}, {gpu_tests['seconds']} s")
    grading = None
    if not args.no_grading:
        print("grading on the GPU ...", end=" ", flush=True)
        only = f" and (sandbox or {' or '.join(args.lessons)})" if args.lessons else ""
        grading = run_pytest(["tests/test_gpu.py", "-m", "gpu", "-k", f"{GRADING}{only}"], artifacts / "grading.xml",
                             artifacts / "logs" / "grading.log", args.grading_timeout)
        print(f"exit {grading['returncode']}, {grading['seconds']} s")
    print("bench ...", flush=True)
    report = build_report(facts, results, gpu_tests, run_bench(artifacts), _versions(), grading)
    (artifacts / "gpu-report.json").write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    markdown = render_markdown(report)
    (artifacts / "gpu-report.md").write_text(markdown, encoding="utf-8")
    print(markdown)
    if report["status"] == "failed":
        return 1
    return 1 if report["status"] == "partial" and args.require_all else 0


if __name__ == "__main__":
    sys.exit(main())
