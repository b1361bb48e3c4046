"""`make test-gpu`: the GPU runner's suite, and its report.

    python tools/test_gpu.py                    # check CUDA, run everything, write test-artifacts/
    python tools/test_gpu.py 04_mixed_precision # only these lessons' notebooks (plus the gpu tests)
    python tools/test_gpu.py --preflight        # only the quick check (`make test-gpu` runs it first)

1. Checks that this machine can run the GPU path, and stops at once, saying why
   and what to do, when it cannot (no NVIDIA driver, every GPU hidden by
   CUDA_VISIBLE_DEVICES, a CPU-only PyTorch, a driver older than PyTorch's CUDA).
   The quick check uses the standard library only, so it runs before any set-up.
2. With GPUCOURSE_REQUIRE_GPU=1 (a device choice that would fall back to the CPU
   fails instead), runs each solution notebook under `pytest --nbval-lax` (one
   pytest, one kernel, one time per notebook), then the `gpu`-marked tests, then
   `python -m gpucourse bench`.
3. Writes test-artifacts/gpu-report.md and gpu-report.json (and a log and a
   JUnit XML per run): device, driver, versions, each notebook's time and result,
   and what was NOT validated on GPU (TensorFlow or DALI cells where the package
   is missing or installed without GPU support, gpu tests that skipped). Such
   parts are never reported as passed, nor as failed lessons; in the GPU set
   (`make` installs it where nvidia-smi lists a GPU) TensorFlow not seeing the
   GPU is a failure.

Exit status: 0 when everything that ran passed (1 with --require-all if a part
was not validated on GPU), 1 when something failed, 2 when nothing could run.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
REQUIRE_GPU_VAR = "GPUCOURSE_REQUIRE_GPU"
FRAMEWORKS = {  # what a notebook's source says when it uses the framework -> its name in reports
    "tensorflow": (("import_tensorflow(", "import tensorflow"), "TensorFlow"),
    "dali": (("import_dali(", "nvidia.dali"), "DALI"),
}
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
def subprocess_env() -> dict:
    """Strict mode on, and gpucourse importable from this checkout even where it is not installed."""
    env = dict(os.environ, **{REQUIRE_GPU_VAR: "1"})
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT / "utils"), env.get("PYTHONPATH")) if p)
    return env


def notebook_uses(path: Path) -> list[str]:
    """The optional frameworks a notebook's code cells use: "tensorflow", "dali"."""
    cells = json.loads(Path(path).read_text(encoding="utf-8")).get("cells", [])
    code = "\n".join("".join(c.get("source", "")) for c in cells if c.get("cell_type") == "code")
    return [name for name, (needles, _) in FRAMEWORKS.items() if any(n in code for n in needles)]


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


def run_pytest(args: list[str], junit: Path, log: Path, timeout: float) -> dict:
    command = [sys.executable, "-m", "pytest", *args, "-p", "no:xdist", "-o", "junit_family=xunit1",
               f"--junitxml={junit}", "-rfEs"]
    start, timed_out = time.monotonic(), False
    with open(log, "w", encoding="utf-8") as out:
        out.write("$ " + " ".join(command) + "\n")
        out.flush()
        try:
            returncode = subprocess.run(command, cwd=ROOT, env=subprocess_env(), stdout=out, stderr=subprocess.STDOUT,
                                        timeout=timeout).returncode
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
def framework_status(facts: dict) -> dict[str, str | None]:
    """For TensorFlow and DALI: None when validated on the GPU, else why not."""
    status = {}
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
    return status


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
        "device": devices[0] if devices else None,
        "compute_capability": gpu and gpu.get("compute_capability"),
        "memory_gib": gpu and gpu.get("memory_gib"),
        "gpus_on_machine": len(driver.get("gpus") or []),
        "driver": driver.get("version"), "driver_cuda": driver.get("cuda"),
        "torch": torch_.get("version"), "torch_cuda": torch_.get("cuda"), "cudnn": torch_.get("cudnn"),
        "tensorflow": framework("tensorflow"), "dali": framework("dali"),
        "python": facts.get("python"), "platform": facts.get("platform"), "gpucourse": facts.get("gpucourse"),
        "cuda_visible_devices": facts.get("cuda_visible_devices"), **versions,
    }


def build_report(facts: dict, notebooks: list[dict], gpu_tests: dict | None, bench: dict | None,
                 versions: dict | None = None) -> dict:
    """The report (plain data) from the runs' results. Pure: tested on a CPU with made-up results.

    ``notebooks``: {"notebook", "uses", and run_pytest's "returncode", "timed_out", "seconds", "cases"};
    ``gpu_tests``: run_pytest's result; ``bench``: the bench card or {"error": ...}; ``facts``: doctor's facts.
    """
    frameworks = framework_status(facts)
    not_validated: list[dict] = []
    rows = []
    for nb in notebooks:
        bad = [c for c in nb.get("cases", []) if c["outcome"] in {"failed", "error"}]
        missing = [f"{FRAMEWORKS[f][1]} ({frameworks[f]})" for f in nb.get("uses", []) if frameworks.get(f)]
        if nb.get("timed_out"):
            result = "timeout"
        elif bad or nb.get("returncode") != 0 or not nb.get("cases"):
            result = "failed"
        else:
            result = "partial" if missing else "passed"
        rows.append({"notebook": nb["notebook"], "result": result, "seconds": nb.get("seconds"),
                     "cells": len(nb.get("cases", [])), "failed_cells": [f"{c['name']}: {c['message']}" for c in bad],
                     "not_validated_on_gpu": missing, "log": nb.get("log")})
    for name, why in frameworks.items():
        users = [nb["notebook"] for nb in notebooks if name in nb.get("uses", [])]
        if why and users:
            not_validated.append({"what": f"{FRAMEWORKS[name][1]} cells", "why": why, "where": users})

    tests = None
    if gpu_tests is not None:
        cases = gpu_tests.get("cases", [])
        failed = [f"{c['id']}: {c['message']}" for c in cases if c["outcome"] in {"failed", "error"}]
        skipped = [c for c in cases if c["outcome"] == "skipped"]
        passed = sum(c["outcome"] == "passed" for c in cases)
        ok = gpu_tests.get("returncode") == 0 and not gpu_tests.get("timed_out") and passed > 0
        tests = {"result": "passed" if ok and not failed else "failed", "passed": passed, "failed": failed,
                 "skipped": [f"{c['id']}: {c['message']}" for c in skipped], "seconds": gpu_tests.get("seconds"),
                 "log": gpu_tests.get("log")}
        if gpu_tests.get("timed_out"):
            tests["failed"].append("the gpu tests timed out")
        elif not cases:
            tests["failed"].append(f"no gpu test ran (pytest exit status {gpu_tests.get('returncode')})")
        for c in skipped:
            not_validated.append({"what": f"gpu test {c['id']}", "why": f"skipped: {c['message']}", "where": []})

    problems = [f"{r['notebook']}: {r['result']}" for r in rows if r["result"] in {"failed", "timeout"}]
    tf = facts.get("tensorflow") or {}
    if facts.get("course_set") == "gpu" and tf.get("installed") and not tf.get("error") and not tf.get("gpus"):
        problems.append("TensorFlow sees no GPU, though the GPU set installs its CUDA libraries: `python -m gpucourse doctor`")
    if tests and tests["result"] != "passed":
        problems.append("gpu tests: failed")
    if bench is not None and "error" in bench:
        problems.append(f"bench: {bench['error'][-300:]}")
    status = "failed" if problems else "partial" if not_validated else "passed"
    return {"status": status, "problems": problems, "environment": _environment(facts, versions or {}),
            "notebooks": rows, "gpu_tests": tests, "not_validated_on_gpu": not_validated, "bench": bench}


def render_markdown(report: dict) -> str:
    env = report["environment"]
    headline = {"passed": "PASSED: every notebook and gpu test passed on the GPU",
                "partial": "PASSED WHAT RAN, but some parts were NOT VALIDATED ON GPU (below)",
                "failed": "FAILED"}[report["status"]]
    lines = [f"# GPU test report: {headline}", "",
             f"- device: {env.get('device')} (compute capability {env.get('compute_capability')}, "
             f"{env.get('memory_gib')} GiB; {env.get('gpus_on_machine')} GPU(s) on the machine, "
             f"CUDA_VISIBLE_DEVICES={env.get('cuda_visible_devices')})",
             f"- NVIDIA driver {env.get('driver')} (CUDA {env.get('driver_cuda')}); PyTorch {env.get('torch')} "
             f"(CUDA {env.get('torch_cuda')}, cuDNN {env.get('cudnn')})",
             f"- TensorFlow: {env.get('tensorflow')}; DALI: {env.get('dali')}",
             f"- Python {env.get('python')} on {env.get('platform')}; gpucourse {env.get('gpucourse')}, "
             f"pytest {env.get('pytest')}, nbval {env.get('nbval')}; commit {env.get('commit')}; {env.get('date')}",
             f"- strict mode: {REQUIRE_GPU_VAR}=1 (no CPU fallback)", ""]
    if report["problems"]:
        lines += ["## Problems", *[f"- {p}" for p in report["problems"]], ""]
    lines += ["## Notebooks (`pytest --nbval-lax`)", "", "| notebook | result | time | not validated on GPU |",
              "|---|---|---|---|"]
    for row in report["notebooks"]:
        missing = ", ".join(row["not_validated_on_gpu"]) or "-"
        lines.append(f"| {row['notebook']} | {row['result']} | {row['seconds']} s | {missing} |")
    for row in report["notebooks"]:
        if row["failed_cells"]:
            more = len(row["failed_cells"]) - 1
            later = f" (and {more} later cell(s); log: {row['log']})" if more else f" (log: {row['log']})"
            lines.append(f"\n{row['notebook']}: first failure {row['failed_cells'][0]}{later}")
    tests = report["gpu_tests"]
    if tests:
        lines += ["", f"## gpu-marked tests: {tests['result']}", "",
                  f"{tests['passed']} passed, {len(tests['failed'])} failed, {len(tests['skipped'])} skipped "
                  f"in {tests['seconds']} s", *[f"- FAILED {t}" for t in tests["failed"]],
                  *[f"- skipped {t}" for t in tests["skipped"]]]
    lines += ["", "## Not validated on GPU", ""]
    lines += [f"- {item['what']}: {item['why']}" + (f" ({', '.join(item['where'])})" if item["where"] else "")
              for item in report["not_validated_on_gpu"]] or ["- nothing: every part ran on the GPU"]
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
    import importlib.metadata

    versions = {"date": time.strftime("%Y-%m-%d %H:%M %Z")}
    for name in ("pytest", "nbval"):
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


# --------------------------------------------------------------------- main
def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("lessons", nargs="*", help="lesson folders to run (default: every one in solutions/)")
    parser.add_argument("--preflight", action="store_true", help="only the quick check (standard library only)")
    parser.add_argument("--artifacts", type=Path, default=ROOT / "test-artifacts", help="where the report goes")
    parser.add_argument("--timeout", type=float, default=1800, help="seconds per notebook (and for the gpu tests)")
    parser.add_argument("--require-all", action="store_true", help="fail when a part is not validated on GPU")
    args = parser.parse_args(argv)

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
    facts = doctor.get("facts") or {}
    results = []
    print(f"{REQUIRE_GPU_VAR}=1; {len(notebooks)} notebook(s), then the gpu tests, then the bench. Logs: {artifacts}")
    for i, path in enumerate(notebooks, 1):
        rel, lesson = str(path.relative_to(ROOT)), path.parent.name
        print(f"[{i}/{len(notebooks)}] {rel} ...", end=" ", flush=True)
        run = run_pytest([rel, "--nbval-lax", "--nbval-current-env", "--nbval-cell-timeout", str(args.timeout)],
                         artifacts / f"{lesson}.xml", artifacts / "logs" / f"{lesson}.log", args.timeout)
        results.append({"notebook": rel, "uses": notebook_uses(path), **run})
        print(f"exit {run['returncode']}, {run['seconds']} s")
    print("gpu-marked tests ...", end=" ", flush=True)
    gpu_tests = run_pytest(["tests", "-m", "gpu"], artifacts / "gpu-tests.xml", artifacts / "logs" / "gpu-tests.log",
                           args.timeout)
    print(f"exit {gpu_tests['returncode']}, {gpu_tests['seconds']} s")
    print("bench ...", flush=True)
    report = build_report(facts, results, gpu_tests, run_bench(artifacts), _versions())
    (artifacts / "gpu-report.json").write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    markdown = render_markdown(report)
    (artifacts / "gpu-report.md").write_text(markdown, encoding="utf-8")
    print(markdown)
    if report["status"] == "failed":
        return 1
    return 1 if report["status"] == "partial" and args.require_all else 0


if __name__ == "__main__":
    sys.exit(main())
