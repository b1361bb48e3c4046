"""The GPU runner (coursetools.gpurun) on a CPU: it stops at once without CUDA; its report, built
from a run's record, says what ran, what did not and why, each lesson's parts and claims; it tells a
false claim from a flaky one, a busy GPU, the machine's problem and a gap (not validated, never
failed). The GPU path runs on a GPU runner; the kit is test_gpu_kit.py's."""

from __future__ import annotations

import copy
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import nbformat
import pytest
from coursetools.course import ROOT, solution_path
from coursetools.course import lessons as all_lessons
from coursetools.gpurun import catalogue, gpustate, preflight, render, report, run, steps
from coursetools.grading import cells, sandbox

GPURUN = [sys.executable, "-m", "coursetools.gpurun", "--artifacts"]
no_driver = pytest.mark.skipif(
    preflight.nvml_gpus()[0] is not None, reason="this machine has an NVIDIA driver"
)


def _timed(command, **env):
    start = time.monotonic()
    env = {k: v for k, v in {**os.environ, **env}.items() if v is not None}
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=60, env=env)
    return done, time.monotonic() - start


# ---- the quick check, the machine's problems and gaps ----
def test_stops_at_once_when_every_gpu_is_hidden(tmp_path):
    done, seconds = _timed([*GPURUN, str(tmp_path)], CUDA_VISIBLE_DEVICES="")
    assert done.returncode == 2, done.stdout + done.stderr
    assert seconds < 10, "the check comes before any work"
    assert "cannot run the GPU path" in done.stderr and "hides every GPU" in done.stderr
    assert "unset CUDA_VISIBLE_DEVICES" in done.stderr and "make test" in done.stderr
    assert not any(tmp_path.iterdir()), "nothing ran, so nothing is reported"


@no_driver
def test_stops_at_once_without_an_nvidia_driver(tmp_path):
    done, seconds = _timed([*GPURUN, str(tmp_path)], CUDA_VISIBLE_DEVICES=None)
    assert done.returncode == 2 and seconds < 10
    assert "no NVIDIA driver" in done.stderr and "nvidia-smi" in done.stderr
    assert "`make test`" in done.stderr and "Traceback" not in done.stderr


@pytest.mark.skipif(shutil.which("make") is None, reason="needs make")
def test_make_test_gpu_checks_before_any_set_up():
    command = ["make", "--no-print-directory", "test-gpu", f"PYTHON={sys.executable}"]
    done, seconds = _timed(command, CUDA_VISIBLE_DEVICES="-1")
    assert done.returncode != 0 and seconds < 10
    assert "hides every GPU" in done.stderr and "pip install" not in done.stdout


def test_the_preflight_is_the_standard_library_only():
    """`make test-gpu` runs it before anything is installed: no third-party module may load."""
    code = (
        "import sys; before = set(sys.modules)\n"
        "from coursetools.gpurun import run, preflight, gpustate, steps, wheels\n"
        "third = {m.split('.')[0] for m in set(sys.modules) - before}\n"
        "print(sorted(third - set(sys.stdlib_module_names) - {'coursetools'}))"
    )
    done, _ = _timed([sys.executable, "-S", "-c", code], PYTHONPATH=str(ROOT / "tools"))
    assert done.stdout.strip() == "[]", done.stdout + done.stderr


def _doctor(**torch_facts):
    return {"facts": {"torch": {"installed": True, "version": "2.14.1", **torch_facts}}}


def test_the_quick_check_and_the_pytorch_check():
    no_lib = lambda: (None, "libnvidia-ml.so.1: cannot open shared object file")  # noqa: E731
    why, fix = preflight.quick_problem({}, nvml=no_lib)
    assert "no NVIDIA driver" in why and "libnvidia-ml" in why and "nvidia-smi" in fix
    assert "lists no GPU" in preflight.quick_problem({}, nvml=lambda: (0, ""))[0]
    assert preflight.quick_problem({"CUDA_VISIBLE_DEVICES": "0"}, nvml=lambda: (1, "")) is None
    hidden = preflight.quick_problem({"CUDA_VISIBLE_DEVICES": "-1"}, nvml=lambda: (8, ""))
    assert "hides every GPU" in hidden[0]
    assert preflight.cuda_problem(_doctor(cuda="13.0", cuda_available=True)) is None
    assert "not installed" in preflight.cuda_problem({"facts": {"torch": {"installed": False}}})[0]
    assert "CPU-only build" in preflight.cuda_problem(_doctor(cuda=None))[0]
    assert "fails to import: boom" in preflight.cuda_problem(_doctor(error="boom"))[0]
    old_driver = {**_doctor(cuda="13.0", cuda_available=False), "findings": []}
    assert preflight.cuda_problem(old_driver)[0] == "PyTorch sees no CUDA device"
    error = {"level": "error", "problem": "The driver supports CUDA 12.2", "fix": "Update it"}
    old_driver["findings"] = [{"level": "info", "problem": "TensorFlow is not installed"}, error]
    assert preflight.cuda_problem(old_driver) == ("The driver supports CUDA 12.2", "Update it")
    crashed = {
        "facts": {},
        "error": "Traceback ...\nModuleNotFoundError: No module named 'numpy'\n",
    }
    why, fix = preflight.cuda_problem(crashed)
    assert why.endswith("failed (ModuleNotFoundError: No module named 'numpy')"), "not 'no PyTorch'"
    message = preflight.stop_message(("why", "fix"))
    assert "why: why." in message and "what to do: fix." in message


def test_the_machine_checks_say_the_problem_and_its_fix(tmp_path):
    """torchvision, /dev/shm (the doctor's finding), an externally managed Python, a compiler."""
    torch_ = {"torch": "2.11.0+cu130", "cuda": "13.0"}
    missing = {**torch_, "error": "ModuleNotFoundError: No module named 'torchvision'"}
    found = preflight.torchvision_problem(missing)
    assert found["code"] == "torchvision" and "No module named 'torchvision'" in found["problem"]
    assert "torch 2.11.0+cu130" in found["fix"]
    cpu_only = {**torch_, "torchvision": "0.26.0+cpu", "vision_cuda": -1}
    assert "no CUDA kernels" in preflight.torchvision_problem(cpu_only)["problem"]
    assert preflight.torchvision_problem({**cpu_only, "vision_cuda": 13000}) is None
    assert preflight.torchvision_problem({"error": "the probe did not run"}) is None, "no torch"
    (small,) = [p for p in preflight.machine_problems(SMALL_SHM, {}) if p["code"] == "shm"]
    assert "--shm-size" in small["fix"] and "bus error" in small["problem"]
    assert small["needles"] == ["num_workers"] and "Bus error" in small["symptoms"]
    assert not [p for p in preflight.machine_problems({}, {}) if p["code"] == "shm"]
    (tmp_path / "EXTERNALLY-MANAGED").write_text("[externally-managed]\n")
    managed = preflight.managed_problem(str(tmp_path), prefix="/usr", base="/usr")
    assert "externally managed" in managed["problem"] and "--system-site-packages" in managed["fix"]
    assert preflight.managed_problem(str(tmp_path), prefix="/v", base="/usr") is None, "a venv"
    nothing = preflight.compiler_problem({}, which=lambda name: None, include=str(tmp_path))
    assert nothing.startswith("no C compiler ($CC, gcc or clang) and no Python.h: torch.compile")
    (tmp_path / "Python.h").touch()
    gcc = preflight.compiler_problem({}, which=lambda n: f"/usr/bin/{n}", include=str(tmp_path))
    assert gcc is None


def _gaps(*findings, gpus=2, **local):
    """preflight.machine_gaps for a machine that has all but what ``findings`` (the doctor's
    (code, problem) pairs) and ``local`` (local_facts) say it lacks."""
    found = [{"code": c, "level": "info", "problem": p} for c, p in findings]
    doctor = {"facts": {"torch": {"devices": [H100] * gpus}}, "findings": found}
    have = {"compiler": None, "dali_tf_plugin": True, "rapids": True}
    return preflight.machine_gaps(doctor, {**have, **local})


H100 = "NVIDIA H100 80GB HBM3"
NO_DALI = ("framework_missing", "DALI is not installed: its cells are skipped.")
NO_TF = ("framework_missing", "TensorFlow is not installed: its cells are skipped.")
TF_NO_GPU = ("tf_without_cuda", "TensorFlow 2.21.0 sees no GPU: its CUDA libraries are missing.")
NO_CC = "no C compiler ($CC, gcc or clang): torch.compile cannot build its launchers"
NO_PLUGIN = "not installed (it compiles against TensorFlow)"
NO_RAPIDS = "cuDF and cuML are not installed (Colab's GPU runtime has them)"
ONE_GPU = "1 GPU visible: NCCL, DDP and DataParallel across GPUs did not run"
SHM = "/dev/shm holds only 64 MiB (...): DataLoader workers ... kills the worker with a bus error."
SMALL_SHM = {"findings": [{"code": "small_dev_shm", "problem": SHM, "fix": "`--shm-size=2g`."}]}
PEP668 = "externally-managed"  # a system Python running the tests


def test_the_torchvision_probe_runs_in_the_python_it_checks(tmp_path):
    """A Python whose torch and torchvision are small stand-ins; the real ones are probed in the
    Python the kit's stand-in GPU machine is built on (test_gpu_kit.py)."""
    site = tmp_path / "site"
    for module, code in {
        "torch/__init__.py": "__version__ = '9.9.9+cu999'\nfrom . import version\n",
        "torch/version.py": "cuda = '99.9'\n",
        "torchvision/__init__.py": "__version__ = '8.8.8+cu999'\n",
        "torchvision/extension.py": "def _check_cuda_version():\n    return 99090\n",
    }.items():
        (site / module).parent.mkdir(parents=True, exist_ok=True)
        (site / module).write_text(code)
    python = tmp_path / "python"
    python.write_text(f'#!/bin/sh\nPYTHONPATH={site} exec {sys.executable} -S "$@"\n')
    python.chmod(0o755)
    found = dict(torch="9.9.9+cu999", cuda="99.9", torchvision="8.8.8+cu999", vision_cuda=99090)
    assert preflight.probe_torchvision(str(python)) == found
    (site / "torchvision" / "extension.py").write_text("raise OSError('undefined symbol')\n")
    assert preflight.probe_torchvision(str(python))["error"] == "OSError: undefined symbol"
    gone = preflight.probe_torchvision("/nonexistent/python")["error"]
    assert gone.startswith("the probe did not run")


# ---- what the steps leave: cell parts, claims, JUnit ----
def _notebook(path, *sources):
    found = [{"cell_type": "code", "source": s} for s in sources]
    path.write_text(json.dumps({"cells": [*found, {"cell_type": "markdown", "source": "dali"}]}))
    return path


def test_cell_parts_and_the_claims_catalogue(tmp_path):
    two = _notebook(tmp_path / "a.ipynb", ["import torch\n", "x = 1"], "dali = gc.import_dali()")
    assert steps.code_cells(two) == ["import torch\nx = 1", "dali = gc.import_dali()"]
    assert steps.cell_parts(two) == ["PyTorch", "DALI"]
    named = _notebook(tmp_path / "c.ipynb", "x = 1", 'claims.needs("DALI\'s plugin", ok)')
    assert steps.cell_parts(named) == ["PyTorch", "DALI"], "DALI, whatever its case"
    setup = _notebook(tmp_path / "b.ipynb", "# Set-up: pip install tensorflow\n", "tf.constant(1)")
    assert steps.cell_parts(setup) == ["PyTorch", "TensorFlow"], "the set-up cell is everyone's"
    lesson = steps.cell_parts(ROOT / "solutions/01_verify_gpu/verify_gpu.ipynb")
    assert "TensorFlow" in lesson and lesson[0] == "PyTorch", "lesson 01 shows TF's device list"

    path = _notebook(
        tmp_path / "nb.ipynb",
        "%matplotlib inline\nfrom gpucourse import claims\n",
        "claims.claim('a literal', 1.0, device=device, at_least=0.5)\n"
        "gpucourse.claims.claim(f'{label}: fast', x, device=device, at_most=1)\n",
        "claims.claim(text, 2.0, device=device, at_least=1)\nclaims.needs('two GPUs', False)",
        "with tf.device('/gpu:0'):\n    claims.claim('tf.data is fast', 2, device=d, at_least=1)",
    )
    found = catalogue.lesson_claims(path)
    assert [(e["cell"], e["part"], e["text"]) for e in found] == [
        (1, "PyTorch", "a literal"),
        (1, "PyTorch", "{label}: fast"),
        (2, "PyTorch", "the claim computed in code cell 2 (text)"),
        (3, "TensorFlow", "tf.data is fast"),
    ]
    recorded = [{"kind": "claim", "claim": "pinned: fast"}, {"kind": "claim", "claim": "made up"}]
    ran, missing = catalogue.match(found, recorded)
    assert [e["text"] for e in missing] == ["a literal", "tf.data is fast"]
    assert len(ran) == 2 and catalogue.part_of(found, "tf.data is fast") == "TensorFlow"
    every = [e for name in all_lessons() for e in catalogue.lesson_claims(solution_path(name))]
    assert len(every) >= 20, "the lessons' claims are found"


JUNIT = """<?xml version="1.0" encoding="utf-8"?><testsuites><testsuite name="pytest" tests="6">
<testcase classname="solutions.01_verify_gpu.verify_gpu.ipynb" name="Cell 0" time="2.5"/>
<testcase classname="solutions.01_verify_gpu.verify_gpu.ipynb" name="Cell 1" time="0.5">
<failure message="#x1B[91mNotebook cell execution failed#x1B[0m&#10;Cell 1: Cell execution caused an exception&#10;Input:&#10;
device = gpucourse.choose_device()&#10;[+27 more lines; full report in element text]">Input:
#x1B[31mRuntimeError#x1B[39m                          Traceback (most recent call last)
#x1B[32m---> #x1B[39m#x1B[32m11#x1B[39m device = gpucourse.choose_device()
#x1B[31mRuntimeError#x1B[39m: GPUCOURSE_REQUIRE_GPU=1 forbids the CPU fallback
</failure></testcase>
<testcase classname="tests.test_gpu" name="test_pinned" time="0.1"><skipped type="pytest.skip" message="needs CUDA"/>
</testcase>
<testcase classname="" name="Cell 3" time="0"><error message="kernel died"/></testcase>
<testcase classname="tests.test_gpu" name="test_copy" time="0.3"><failure message="AssertionError: pinned 9 GB/s">
def test_copy(cuda):
&gt;       assert pinned.gbps &gt; pageable.gbps, "pinned 9 GB/s"
E       AssertionError: pinned 9 GB/s
E       assert 9.0 &gt; 12.0</failure></testcase>
<testcase classname="tests.gpu.test_on_cuda" name="test_autograde_on_the_gpu[05_dali_pipelines]" time="80">
<properties><property name="not_validated" value="05 test_dali_loader: DALI: not installed"/>
<property name="other" value="x"/><property name="not_validated" value="05 fixture f: not judged"/></properties>
</testcase>
</testsuite></testsuites>"""  # noqa: E501 (nbval's and pytest's JUnit XML, as they write it)


def test_parse_junit(tmp_path):
    (tmp_path / "run.xml").write_text(JUNIT)
    cases = steps.parse_junit(tmp_path / "run.xml")
    outcomes = ["passed", "failed", "skipped", "error", "failed", "passed"]
    assert [c["outcome"] for c in cases] == outcomes
    assert cases[1]["name"] == "Cell 1", "nbval's message: the exception, no colours, no input"
    assert cases[1]["message"] == "RuntimeError: GPUCOURSE_REQUIRE_GPU=1 forbids the CPU fallback"
    assert cases[2]["message"] == "needs CUDA" and cases[3]["message"] == "kernel died"
    assert cases[4]["message"] == "AssertionError: pinned 9 GB/s"
    assert cases[2]["id"] == "tests.test_gpu::test_pinned" and cases[3]["id"] == "Cell 3"
    assert cases[0]["not_validated"] == []
    said = ["05 test_dali_loader: DALI: not installed", "05 fixture f: not judged"]
    assert cases[5]["not_validated"] == said, "only the not_validated properties, in order"
    assert steps.parse_junit(tmp_path / "missing.xml") == []
    (tmp_path / "cut.xml").write_text(JUNIT[:300])
    assert steps.parse_junit(tmp_path / "cut.xml") == [], "a file cut short by a stop"


# ---- the report, built from faked runs ----
FACTS = {
    "python": "3.11.9",
    "driver": {"version": "570.86", "gpus": [{"name": H100, "compute_capability": "9.0"}]},
    "torch": {"installed": True, "version": "2.14.1", "cuda": "12.8", "devices": [H100]},
}
FACTS["torch"]["cuda_available"] = True
IDLE = {"gpus": [{"index": 0, "name": "H100", "utilization_percent": 0, "processes": []}]}


def _case(name, outcome="passed", message="", not_validated=()):
    found = {"id": name, "name": name, "outcome": outcome, "seconds": 1.0, "message": message}
    return {**found, "not_validated": list(not_validated)}


def _step(kind, name, cases, lesson=None, **extra):
    bad = any(c["outcome"] in {"failed", "error"} for c in cases)
    found = {"id": name, "kind": kind, "lesson": lesson, "state": "done", "estimate": 60}
    found |= {"returncode": int(bad), "timed_out": False, "seconds": 42.0, "log": f"{name}.log"}
    return {**found, "cases": list(cases), **extra}


def _lesson_step(lesson, outcomes=("passed", "passed"), message="boom", **extra):
    """A lesson's step: its cells' outcomes (a failure says ``message``), claims, code, parts."""
    cases = [_case(f"Cell {i}", o, message * (o != "passed")) for i, o in enumerate(outcomes)]
    loaded = {"notebook": f"solutions/{lesson}/{lesson[3:]}.ipynb", "claims": [], "code": ""}
    return _step("lesson", f"lesson {lesson}", cases, lesson, **{**loaded, "parts": [], **extra})


def _real_lesson(lesson, fails, message):
    """A lesson's step with its real code and parts; the cells whose code ``fails`` failed."""
    notebook = next(ROOT.glob(f"solutions/{lesson}/*.ipynb"))
    codes, parts = steps.code_cells(notebook), steps.cell_parts(notebook)
    outcomes = ["failed" if fails(code) else "passed" for code in codes]
    return _lesson_step(lesson, outcomes, message, code="\n".join(codes), parts=parts)


def _grading_step(lesson=None, *cases):
    name = f"grading {lesson or 'the small assignment'}"
    return _step("grading", name, cases or [_case(f"test_autograde[{lesson}]")], lesson)


GPU_TESTS = _step("gpu tests", "gpu tests", [_case("tests.test_gpu::test_a")])
DONE = [_grading_step(), GPU_TESTS]


def _run(steps=(), machine=(), **extra):
    """A run's record as run.load leaves it: ``steps``, then the small assignment's grading and the
    gpu tests, each passed."""
    record = {"started": time.time(), "budget": None, "rehearsal": False, "facts": FACTS}
    record |= {"versions": {"commit": "abc1234"}, "gpu_before": IDLE, "gpu_after": IDLE}
    record |= {"machine": list(machine), "catalogue": {}}
    return {**record, "steps": [*steps, *copy.deepcopy(DONE)], **extra}


def _build(record):
    built = report.build_report(record)
    json.dumps(built)
    return built, render.render_markdown(built)


def _claim(text, passed, measured=1.0, bound="at least 1.5", **extra):
    found = {"kind": "claim", "claim": text, "measured": measured, "unit": "x", "bound": bound}
    return {**found, "passed": passed, "source": "the lesson's arithmetic", **extra}


def test_a_missing_framework_leaves_its_part_not_validated():
    """Lesson 01 without TensorFlow, or with one that sees no GPU (its cells skip themselves): its
    TF part is not validated, never failed, and its PyTorch part passed; a failing TF cell fails."""
    code = "x = torch.ones(1)\ntf = gpucourse.import_tensorflow()"
    first = _lesson_step("01_verify_gpu", code=code, parts=["PyTorch", "TensorFlow"])
    second = _lesson_step("02_tensors_on_device", code="x = torch.ones(1)")
    for finding in (NO_TF, TF_NO_GPU):
        built, markdown = _build(_run([first, second], machine=_gaps(finding)))
        assert built["status"] == "partial" and built["problems"] == built["skipped"] == []
        one, two = built["notebooks"]
        assert one["result"] == "not validated" and two["result"] == "passed"
        assert one["parts"]["PyTorch"]["result"] == "passed", "the PyTorch part ran and passed"
        why = finding[1][:-1]
        part = {"result": "not validated", "not_validated": [f"TensorFlow ({why})"]}
        assert one["parts"]["TensorFlow"] == part and one["failed_cells"] == []
        item = {"what": "TensorFlow", "why": why, "where": [one["notebook"]]}
        assert built["not_validated_on_gpu"] == [item] and f"- TensorFlow: {why}" in markdown
    assert built["facts"] == FACTS and built["versions"] == {"commit": "abc1234"}
    assert f"- device: {H100} (compute capability 9.0, None GiB; 1 visible to PyTorch, " in markdown
    assert (
        "- NVIDIA driver 570.86 (CUDA None); PyTorch 2.14.1 (CUDA 12.8); TensorFlow: " in markdown
    )
    assert "- commit abc1234; " in markdown and "TensorFlow: not installed; DALI" in markdown
    assert markdown.startswith("# GPU test report: PASSED WHAT RAN; some parts NOT VALIDATED")
    row = f"| {one['notebook']} | not validated | 42.0 s | passed | not validated: TensorFlow ("
    assert row in markdown
    message = "AssertionError: the loss did not fall"  # a gap hides no failure it does not explain
    fails = _lesson_step("01_verify_gpu", ("passed", "failed"), message, code=code)
    fails["parts"] = first["parts"]
    for machine in ([], _gaps(TF_NO_GPU)):
        built, markdown = _build(_run([fails], machine=machine))
        row, parts = built["notebooks"][0], built["notebooks"][0]["parts"]
        assert built["status"] == row["result"] == parts["TensorFlow"]["result"] == "failed"
        assert row["failed_cells"] == [f"Cell 1: {message}"] and "## Problems" in markdown
        assert parts["PyTorch"]["result"] == "passed"


def test_steps_not_run_are_named_never_failures():
    """Planned (the run stopped before it), running (stopped during it), left out (the budget, an
    option): each named with why in "skipped", never passed, never failed."""
    running = {**_lesson_step("02_tensors_on_device", ("passed", "failed")), "state": "running"}
    planned = {**_lesson_step("03_batching_pipelines", ()), "state": "planned"}
    stopped = _lesson_step("04_mixed_precision", timed_out=True, out_of_time=True)
    left_out = {**_grading_step("01_verify_gpu"), "state": "left out", "why": "not run: --x"}
    record = _run([_lesson_step("01_verify_gpu"), running, planned, stopped, left_out])
    built, markdown = _build({**record, "stopped": "stopped by SIGTERM at 12:00:00"})
    assert built["skipped"] == [
        "lesson 02_tensors_on_device: not finished: out of time (the run stopped during it)",
        "lesson 03_batching_pipelines: not run: out of time (the run stopped before it)",
        "lesson 04_mixed_precision: not finished: out of time (the run stopped during it)",
        "grading 01_verify_gpu: not run: --x",
    ]
    assert built["status"] == "partial" and built["problems"] == []
    assert [row["lesson"] for row in built["notebooks"]] == ["01_verify_gpu"]
    assert built["progress"] == "3 of 7 steps finished; stopped by SIGTERM at 12:00:00"
    assert "; NOT RUN: 4 step(s) (below)" in markdown.splitlines()[0]
    assert "PASSED: every" not in markdown and "## Not run" in markdown


def test_failures_timeouts_and_skips():
    timeout = _lesson_step("01_verify_gpu", timed_out=True, returncode=None)
    none_ran = _lesson_step("02_tensors_on_device", (), returncode=5)
    outside = _lesson_step("03_batching_pipelines", returncode=1)  # failed outside any cell
    record = _run([timeout, none_ran, outside])
    record["steps"][-1]["cases"].append(_case("tests.test_gpu::test_b", "skipped", "no CUDA"))
    built = report.build_report(record)
    assert [row["result"] for row in built["notebooks"]] == ["timeout", "failed", "failed"]
    assert built["status"] == "failed" and len(built["problems"]) == 3
    assert built["gpu_tests"]["skipped"] == ["tests.test_gpu::test_b: no CUDA"]
    assert built["gpu_tests"]["result"] == "passed"
    item = {"what": "gpu tests: tests.test_gpu::test_b", "why": "no CUDA", "where": []}
    assert item in built["not_validated_on_gpu"]
    record = _run()
    record["steps"][1] |= {"returncode": 5, "cases": []}
    built = report.build_report(record)
    assert built["gpu_tests"]["failed"] == ["no gpu tests ran (pytest exit status 5)"]
    assert built["status"] == "failed" and built["problems"] == ["gpu tests: failed"]


def test_a_false_claim_fails_a_flaky_one_is_named_flaky():
    claims = [_claim("checkpointing peaks lower", False, 0.9, "at most 0.8")]
    claims.append(_claim("accumulation peaks lower", True, 0.5, "at most 0.65"))
    false = _lesson_step("07_troubleshooting_oom", claims=claims)
    flaky = _lesson_step("08_profile_and_compile", claims=[_claim("the loop is faster", False)])
    rerun = {**flaky, "id": "rerun 08_profile_and_compile", "kind": "rerun"}
    rerun["claims"] = [_claim("the loop is faster", True, 1.6)]
    built, markdown = _build(_run([false, flaky, rerun]))
    oom, profile = built["notebooks"]
    assert oom["result"] == profile["result"] == "failed" and built["status"] == "failed"
    assert [c["verdict"] for c in oom["claims"]] == ["false", "pass"], "the claim after it is there"
    assert [c["verdict"] for c in profile["claims"]] == ["flaky"]
    assert built["problems"] == [
        f"{oom['notebook']}: failed (claim false: checkpointing peaks lower: 0.9x, expected at "
        "most 0.8)",
        f"{profile['notebook']}: failed (claim flaky: the loop is faster: 1x, expected at least "
        "1.5)",
    ]
    row = f"| {oom['notebook']} | checkpointing peaks lower | 0.9x | at most 0.8 | FAIL | the "
    assert (
        row + "lesson's arithmetic |" in markdown and "| 0.5x | at most 0.65 | PASS |" in markdown
    )
    assert "FAIL, then PASS when run again: FLAKY" in markdown


def _nvml(utilisation=3, processes=(), mig=None):
    """A stand-in for the pynvml module, one T4; ``mig`` None: the GPU does not support MIG."""

    def mig_mode(handle):
        return (int(mig), int(mig)) if mig is not None else 1 / 0  # NVMLError_NotSupported

    nv = SimpleNamespace(NVML_CLOCK_SM=1, nvmlInit=int, nvmlShutdown=int)
    nv.nvmlDeviceGetMigMode = mig_mode
    running = [SimpleNamespace(pid=pid, usedGpuMemory=mib * 2**20) for pid, mib in processes]
    values = {"Count": 1, "HandleByIndex": "h0", "Name": "NVIDIA T4", "ClockInfo": 585}
    values |= {"MaxClockInfo": 1590, "PowerManagementLimit": 70000}
    values |= {"UtilizationRates": SimpleNamespace(gpu=utilisation)}
    for name, value in {**values, "ComputeRunningProcesses": running}.items():
        setattr(nv, f"nvmlDeviceGet{name}", lambda *_, value=value: value)
    return nv


def test_the_gpu_state_through_pynvml_and_a_busy_gpu():
    """Read through pynvml (a stand-in module); a false claim on a busy GPU is inconclusive."""
    t4 = {"index": 0, "name": "NVIDIA T4", "utilization_percent": 3, "sm_clock_mhz": 585}
    t4 |= {"sm_clock_max_mhz": 1590, "power_limit_w": 70.0, "processes": [], "mig": None}
    assert gpustate.gpu_state(nv=_nvml()) == {"gpus": [t4]}
    assert gpustate.busy_reasons(gpustate.gpu_state(nv=_nvml())) == [], "no MIG: not sliced"
    sliced = gpustate.busy_reasons(gpustate.gpu_state(nv=_nvml(mig=True)))
    assert sliced == ["GPU 0 (NVIDIA T4): MIG mode on (a slice of the GPU: timings are a fraction)"]
    unread = gpustate.gpu_state(nv=SimpleNamespace(nvmlInit=lambda: 1 / 0))
    assert unread == {"error": "not read: ZeroDivisionError: division by zero"}

    before = gpustate.gpu_state(nv=_nvml(87, [(4242, 9000)]))
    assert before["gpus"][0]["processes"] == [{"pid": 4242, "used_mib": 9000}]
    lesson = _lesson_step("04_mixed_precision", claims=[_claim("AMP is faster", False)])
    record = _run([lesson], gpu_before=before, gpu_after={"error": "not read: NVML"})
    built, markdown = _build(record)
    gpu0 = "GPU 0 (NVIDIA T4): "
    busy = [f"{gpu0}1 other compute process(es) before the run"]
    assert built["busy"] == [*busy, f"{gpu0}87% utilised before the run"]
    assert built["notebooks"][0]["result"] == built["status"] == "inconclusive"
    assert built["notebooks"][0]["claims"][0]["verdict"] == "busy" and built["problems"] == []
    assert markdown.startswith("# GPU test report: INCONCLUSIVE")
    assert "| before | 0: NVIDIA T4 | 87% | 585 / 1590 MHz | 70.0 W | 1 | - |" in markdown
    assert "| after | not read: NVML |" in markdown and "BUSY: GPU 0 (NVIDIA T4)" in markdown
    record["gpu_before"] = gpustate.gpu_state(nv=_nvml())
    record["gpu_after"] = gpustate.gpu_state(nv=_nvml(50, [(7, 10)], mig=True))
    built = report.build_report(record)
    after = [
        f"{gpu0}1 other compute process(es) after the run",
        f"{gpu0}50% utilised after the run",
    ]
    assert built["busy"] == after, "said as after the run, never before; MIG is read before"
    assert built["status"] == "inconclusive"


def test_a_missing_package_or_a_small_shm_is_the_machines():
    no_vision = "ModuleNotFoundError: No module named 'torchvision'"
    vision = _lesson_step("03_batching_pipelines", ("passed", "failed"), no_vision)
    vision["code"] = "data = gpucourse.loaders.jpeg_dataset(root)"
    bus = "RuntimeError: DataLoader worker (pid 77) is killed by signal: Bus error."
    loader = _lesson_step("09_make_it_fast", ("failed",), bus, code="DataLoader(num_workers=8)")
    vision_facts = {"torch": "2.11.0", "cuda": "13.0", "error": no_vision}
    machine = [
        p for p in preflight.machine_problems(SMALL_SHM, vision_facts) if p["code"] != PEP668
    ]
    built, markdown = _build(_run([vision, loader], machine=machine))
    assert [row["result"] for row in built["notebooks"]] == ["machine", "machine"]
    assert built["status"] == "inconclusive" and built["problems"] == []
    assert built["notebooks"][0]["machine_cause"].startswith("torchvision cannot be used")
    assert "--shm-size" in built["notebooks"][1]["machine_cause"]
    assert "## The machine's problems and gaps (not the lessons')" in markdown
    assert "the machine's problem: torchvision cannot be used" in markdown
    plain = _lesson_step("02_tensors_on_device", ("failed",), "Bus error", code="x = 1")
    assert _build(_run([plain], machine=machine))[0]["status"] == "failed", "code without a needle"


def test_the_claims_that_did_not_run_are_listed_by_name():
    entries = [
        {"cell": 3, "part": "PyTorch", "text": "pinned is faster", "pattern": "pinned is faster"},
        {"cell": 5, "part": "PyTorch", "text": "{n} GB/s", "pattern": ".*? GB/s"},
        {"cell": 9, "part": "TensorFlow", "text": "tf.data wins", "pattern": "tf\\.data wins"},
    ]
    unmeasured = _claim("4 GB/s", None, None, checked=False)  # claim(..., None): did not happen
    claims = [_claim("pinned is faster", True, 2.0), unmeasured]
    lesson = _lesson_step("02_tensors_on_device", claims=claims, code="claims.claim('pinned ...")
    record = _run([lesson], catalogue={"02_tensors_on_device": entries})
    built, markdown = _build(record)
    row = built["notebooks"][0]
    assert row["claims_not_run"] == ["{n} GB/s", "tf.data wins"] and row["result"] == "passed"
    assert [c["claim"] for c in row["claims"]] == ["pinned is faster"] and row["would_check"] == []
    assert f"- {row['notebook']}: {{n}} GB/s" in markdown.split("## Claims that did not run")[1]
    record["steps"][0]["claims"] = []
    none = report.build_report(record)["notebooks"][0]["not_validated_on_gpu"]
    assert none == [{"what": "the lesson's GPU claims", "why": "none ran on the GPU"}]
    record["steps"][0]["claims"] = [_claim("4 GB/s", None, 4.0, checked=False)]  # on a CPU
    built, markdown = _build({**record, "rehearsal": True})
    row = built["notebooks"][0]
    assert built["status"] == "rehearsal" and len(row["claims_not_run"]) == 2
    assert row["would_check"] == ["4 GB/s: 4x, expected at least 1.5"]
    assert markdown.startswith("# GPU test report: REHEARSAL ON A CPU: not validated: no GPU")


def test_gaps_leave_lessons_not_validated_never_failed():
    """DALI's TensorFlow plugin, two GPUs, RAPIDS: what the lesson's code uses and the machine
    lacks (preflight.machine_gaps); a precondition the lesson states is said once, in its words.
    Where the machine lacks nothing and all ran, the report is PASSED."""
    assert _gaps(("cuda_visible_devices", "TensorFlow hides a GPU")) == [], "not a framework's"
    assert set(preflight.local_facts()) == {"compiler", "dali_tf_plugin", "rapids"}
    lessons = [
        _lesson_step("05_dali_pipelines", code="dali_tf = gpucourse.import_dali_tf()"),
        _lesson_step("06_data_parallel", code="DistributedDataParallel(model)"),
        _lesson_step("10_gpu_dataframes", code="import cudf", claims=[_claim("fast", True, 2)]),
    ]
    built, markdown = _build(_run(lessons, machine=_gaps()))
    assert built["status"] == "passed" and built["progress"] == "5 of 5 steps finished"
    assert markdown.startswith("# GPU test report: PASSED: every lesson (3), claim (1)")
    assert "nothing: every part ran on the GPU" in markdown
    poor = _gaps(gpus=1, dali_tf_plugin=False, rapids=False)
    assert all(g["kind"] == "gap" and g["needles"] and g["fix"] for g in poor)
    built, markdown = _build(_run(lessons, machine=poor))
    assert [row["result"] for row in built["notebooks"]] == ["not validated"] * 3
    assert built["status"] == "partial" and "PASSED: every" not in markdown
    assert built["notebooks"][0]["parts"]["TensorFlow"]["result"] == "not validated"
    why = {item["what"]: (item["why"], item["where"]) for item in built["not_validated_on_gpu"]}
    assert why == {
        "DALI's TensorFlow plugin": (NO_PLUGIN, [lessons[0]["notebook"]]),
        "two GPUs": (ONE_GPU, [lessons[1]["notebook"]]),
        "RAPIDS": (NO_RAPIDS, [lessons[2]["notebook"]]),
    }
    stated = {"kind": "precondition", "what": "two GPUs for NCCL", "met": False, "why": "1 GPU"}
    row = _build(_run([{**lessons[1], "claims": [stated]}], poor))[0]["notebooks"][0]
    assert row["not_validated_on_gpu"] == [{"what": "two GPUs for NCCL", "why": "1 GPU"}], "once"


def test_a_machine_without_dali():
    """Lesson 05's DALI test cells fail with NO_DALI where the doctor said DALI is missing: its DALI
    part is not validated, never failed; its grading records the DALI exercises as not validated
    and passes; a grading failure the gap explains is not validated, others fail."""
    no_dali = "AssertionError: DALI is not installed here (it ships for Linux only): 0 points."
    lesson = _real_lesson("05_dali_pipelines", lambda c: c.startswith("assert dali is"), no_dali)
    said = "05_dali_pipelines test_dali_loader: DALI: not installed; expected 0"
    graded = _case("test_autograde_on_the_gpu[05_dali_pipelines]", not_validated=[said])
    record = _run([lesson, _grading_step("05_dali_pipelines", graded)], machine=_gaps(NO_DALI))
    built, markdown = _build(record)
    row, dali = built["notebooks"][0], built["notebooks"][0]["parts"]["DALI"]
    assert len(row["failed_cells"]) == 2, "the two DALI test cells"
    assert row["result"] == dali["result"] == "not validated"
    assert "failed: DALI: DALI is not installed" in dali["not_validated"][1]
    assert row["parts"]["PyTorch"]["result"] == "passed"
    assert built["status"] == "partial" and built["problems"] == []
    assert built["grading"]["grading 05_dali_pipelines"]["result"] == "passed"
    item = {"what": f"grading 05_dali_pipelines: {said}", "why": "this machine", "where": []}
    assert item in built["not_validated_on_gpu"] and said in markdown
    error = "ModuleNotFoundError: No module named 'nvidia.dali'"
    record["steps"][1]["cases"] = [_case("test_dali_fixture", "failed", error)]
    graded = report.build_report(record)["grading"]["grading 05_dali_pipelines"]
    assert graded["result"] == "not validated" and graded["failed"] == []
    assert graded["machine"] == [f"test_dali_fixture: {error}"]
    record["steps"][1]["cases"] = [_case("test_dali_fixture", "failed", "AssertionError: 3")]
    assert report.build_report(record)["status"] == "failed", "a gap explains only its symptoms"


def test_a_machine_without_a_c_compiler():
    """Lesson 08's compile cells fail in Inductor: not validated, never failed; its compiled claim,
    recorded with no measurement, did not run: never passed, never failed."""
    inductor = "torch._inductor.exc.InductorError: RuntimeError: Failed to find C compiler."
    lesson = _real_lesson("08_profile_and_compile", lambda c: "torch.compile(" in c, inductor)
    texts = ("the profiler sees the kernels", "compiled is faster")
    lesson["claims"] = [_claim(texts[0], True, 2.0), _claim(texts[1], None, None, checked=False)]
    entries = [{"cell": 1, "part": "PyTorch", "text": t, "pattern": t} for t in texts]
    record = _run([lesson], _gaps(compiler=NO_CC), catalogue={"08_profile_and_compile": entries})
    built, markdown = _build(record)
    row = built["notebooks"][0]
    assert row["result"] == "not validated" and row["failed_cells"]
    assert built["status"] == "partial" and built["problems"] == []
    assert "## Problems" not in markdown and markdown.startswith("# GPU test report: PASSED WHAT")
    assert row["not_validated_on_gpu"][0] == {"what": "a C compiler", "why": NO_CC}
    assert f"failed: a C compiler: {NO_CC}" in row["not_validated_on_gpu"][1]["why"]
    assert [c["claim"] for c in row["claims"]] == ["the profiler sees the kernels"]
    assert row["claims_not_run"] == ["compiled is faster"]
    assert row["would_check"] == [] and "| FAIL" not in markdown


# ---- the plan, the budget, and the runner itself ----
def test_the_plan_and_the_budget(tmp_path):
    """The steps in the order of their value, left out when not asked for; a step whose estimate
    exceeds the time left is left out, with why, in the record and the report."""
    names = ["01_verify_gpu", "02_tensors_on_device"]
    notebooks = [next(ROOT.glob(f"solutions/{n}/*.ipynb")) for n in names]

    def plan(*argv, before=None):
        found = run.plan(notebooks, run.parser().parse_args(list(argv)), before or {})
        return {s["id"]: (s["kind"], s["state"], s["estimate"], s["why"]) for s in found}

    grading = ["grading the small assignment", *(f"grading {n}" for n in names)]
    planned = plan("--budget", "9", before={"lesson 01_verify_gpu": 3.0})
    assert list(planned) == [*(f"lesson {n}" for n in names), *grading, "gpu tests"]
    assert {v[1] for v in planned.values()} == {"planned"}
    guess = run.ESTIMATES
    estimates = [3.0, guess["lesson"], guess["grading the small assignment"], guess["grading"]]
    assert [v[2] for v in planned.values()][:4] == estimates, "the last run's time, or a guess"
    left_out = {k: v[3] for k, v in plan("--no-grading", "--rehearse").items() if v[1] != "planned"}
    no_grading, no_gpu = "not run: not asked for (--no-grading)", "not run: no GPU: a CPU rehearsal"
    assert left_out == {**dict.fromkeys(grading, no_grading), "gpu tests": no_gpu}
    left_out = {k: v[3] for k, v in plan("--no-lessons").items() if v[1] != "planned"}
    assert left_out == dict.fromkeys(
        (f"lesson {n}" for n in names), "not run: not asked for (--no-lessons)"
    )

    args = run.parser().parse_args(["--budget", "1100"])
    record = _run(started=time.time() - 1000, budget=1100)
    record["steps"] = run.plan(notebooks, args, {})
    runner = run.Runner(record, tmp_path, args)
    first, second = record["steps"][:2]
    first["estimate"], second["estimate"] = 30, 200
    assert 80 < runner.start(first) <= 90 and first["state"] == "running", "time left, less reserve"
    assert runner.start(second) is None and second["state"] == "left out"
    assert second["why"].startswith("not run: out of time (needs about 200 s, ")
    written = json.loads((tmp_path / "gpu-report.json").read_text())
    assert f"lesson 02_tensors_on_device: {second['why']}" in written["skipped"]
    assert json.loads((tmp_path / "run.json").read_text())["steps"][1]["state"] == "left out"


def _fake_execute(calls, claim):
    """steps.execute for run.main: one passing test case each, ``claim`` in lesson 07's claims."""

    def execute(command, log, timeout, env):
        calls.append((command, env))
        Path(log).write_text("faked\n")
        junit = next((c.split("=", 1)[1] for c in command if c.startswith("--junitxml=")), None)
        if junit:
            case = '<testcase classname="t" name="test_a" time="1"/>'
            Path(junit).write_text(f"<testsuites><testsuite>{case}</testsuite></testsuites>")
        if steps.CLAIMS_VAR in env and "07_" in " ".join(command):
            Path(env[steps.CLAIMS_VAR]).write_text(json.dumps(claim) + "\n")
        return {"returncode": 0, "timed_out": False, "seconds": 1.0}

    return execute


def test_main_wires_the_steps_reruns_and_the_report(tmp_path, monkeypatch):
    """run.main with each child process faked: what it runs, in which environment, the rerun of a
    lesson whose claim failed, the grading per lesson, and the report it writes."""
    calls = []
    false = _claim("checkpointing peaks lower", False, 0.9, "at most 0.8", unit="")
    monkeypatch.setattr(steps, "execute", _fake_execute(calls, false))
    monkeypatch.setattr(steps, "doctor_report", lambda: {"facts": FACTS, "findings": []})
    monkeypatch.setattr(preflight, "quick_problem", lambda: None)
    monkeypatch.setattr(preflight, "machine_problems", lambda doctor: [])
    monkeypatch.setattr(preflight, "local_facts", lambda: {"dali_tf_plugin": True, "rapids": True})
    monkeypatch.setattr(gpustate, "gpu_state", lambda: IDLE)
    monkeypatch.setattr(signal, "signal", lambda *a: None)
    lessons = ["02_tensors_on_device", "07_troubleshooting_oom"]
    assert run.main([*lessons, "--artifacts", str(tmp_path)]) == 1, "lesson 07's claim is false"
    assert all(e[steps.REQUIRE_GPU_VAR] == "1" for _, e in calls), "strict mode everywhere"
    ran = [c for c, e in calls if e.get(steps.DEFER_VAR) == "1" and steps.CLAIMS_VAR in e]
    ran = [Path(c[c.index("--nbval-lax") - 1]).parent.name for c in ran]
    assert ran == [*lessons, lessons[1]], "lesson 07 ran again: its claim failed"
    picked = sorted(c[c.index("-k") + 1] for c, _ in calls if "-k" in c)
    tests, graded = "not autograde_on_the_gpu and not small_assignment", "autograde_on_the_gpu and"
    assert picked == [f"{graded} {lessons[0]}", f"{graded} {lessons[1]}", tests, "small_assignment"]
    recorded = json.loads((tmp_path / "run.json").read_text())
    assert [s["state"] for s in recorded["steps"]] == ["done"] * 7
    assert recorded["steps"][2]["id"] == "rerun 07_troubleshooting_oom"
    built = json.loads((tmp_path / "gpu-report.json").read_text())
    assert built["status"] == "failed" and len(built["problems"]) == 1
    assert built["problems"][0].startswith("solutions/07_troubleshooting_oom/")
    assert built["grading"]["grading 02_tensors_on_device"]["result"] == "passed"
    assert "bench" not in built and built["versions"]["executable"] == sys.executable
    assert "| checkpointing peaks lower | 0.9 |" in (tmp_path / "gpu-report.md").read_text()

    calls.clear()
    assert run.main([lessons[0], "--no-grading", "--artifacts", str(tmp_path)]) == 0
    assert [c[c.index("-k") + 1] for c, _ in calls if "-k" in c] == [tests], "no grading"
    recorded = json.loads((tmp_path / "run.json").read_text())
    assert recorded["steps"][0]["estimate"] == 1.0, "the last run's time is the estimate"
    built = json.loads((tmp_path / "gpu-report.json").read_text())
    assert built["status"] == "partial" and len(built["skipped"]) == 3, built["skipped"]
    others = [name for name in all_lessons() if name != lessons[0]]
    said = f"{len(others)} of {len(others) + 1} lessons not run (not asked for): "
    assert built["skipped"][0] == said + ", ".join(others), "a subset is never PASSED"


def test_a_false_claim_is_recorded_and_later_claims_run(tmp_path):
    """A real nbval run of a one-cell lesson through Runner.execute: strict mode, its claims file,
    claims deferred. The false claim does not stop the cell; the true claim after it is measured;
    the lesson fails from its claims file; a stale claims file is replaced."""
    source = (
        "from gpucourse import claims\ndevice = 'cuda:0'  # a CUDA device string: claims check\n"
        "claims.claim('checkpointing peaks lower', 0.9, device=device, at_most=0.8)\n"
        "claims.claim('accumulation peaks lower', 0.5, device=device, at_most=0.65)\n"
        "claims.needs('two GPUs', False, device=device, why='1 GPU visible')\n"
    )
    path = tmp_path / "07_troubleshooting_oom" / "troubleshooting_oom.ipynb"
    path.parent.mkdir()
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(source)])
    nb.metadata.kernelspec = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbformat.write(nb, path)
    artifacts = tmp_path / "artifacts"
    for sub in ("logs", "junit", "claims"):
        (artifacts / sub).mkdir(parents=True)
    stale = artifacts / "claims" / "lesson-07_troubleshooting_oom.jsonl"
    stale.write_text('{"kind": "claim", "claim": "stale", "passed": true}\n')
    step = {"id": "lesson 07_troubleshooting_oom", "kind": "lesson", "estimate": 60}
    step |= {"lesson": "07_troubleshooting_oom", "notebook": str(path), "state": "planned"}
    record = {**_run(), "steps": [step]}
    run.Runner(record, artifacts, run.parser().parse_args(["--timeout", "120"])).execute(step)
    log = (artifacts / step["log"]).read_text()
    loaded = run.load(record, artifacts)["steps"][0]
    assert step["state"] == "done" and [c["outcome"] for c in loaded["cases"]] == ["passed"], log
    said = [e.get("claim") or e.get("what") for e in loaded["claims"]]
    assert said == ["checkpointing peaks lower", "accumulation peaks lower", "two GPUs"], "fresh"
    built = json.loads((artifacts / "gpu-report.json").read_text())
    row = built["notebooks"][0]
    assert row["result"] == "failed" and [c["verdict"] for c in row["claims"]] == ["false", "pass"]
    assert row["not_validated_on_gpu"] == [{"what": "two GPUs", "why": "1 GPU visible"}]
    false = "(claim false: checkpointing peaks lower: 0.9, expected at most 0.8)"
    assert built["problems"] == [f"{path}: failed {false}"]


# ---- grading on a GPU: the sandbox passes the GPU through, and a warning never costs a right
# answer its points ----
def test_the_sandbox_passes_the_gpus_and_their_driver_libraries_through(tmp_path):
    dev = tmp_path / "dev"
    passed = "dxg nvidia-modeset nvidia-uvm nvidia-uvm-tools nvidia0 nvidia1 nvidiactl".split()
    for name in [*passed, "null", "nvme0n1", "fb0"]:
        (dev / name).parent.mkdir(parents=True, exist_ok=True)
        (dev / name).touch()
    (dev / "nvidia-caps").mkdir()
    folders = ("site/driver/lib", "run/opengl-driver/lib", "cluster/cuda/lib64")
    site, nix, cuda = (tmp_path / d for d in folders)
    for folder in (site, nix, cuda, tmp_path / "store"):
        folder.mkdir(parents=True)
    (tmp_path / "store" / "libcuda.so.550.54").touch()
    (nix / "libcuda.so.1").symlink_to(tmp_path / "store" / "libcuda.so.550.54")  # NixOS's store
    ldconfig = (
        f"\tlibcuda.so.1 (libc6,x86-64) => /usr/lib/x86_64-linux-gnu/libcuda.so.1\n"
        f"\tlibcuda.so.1 (libc6,x86-64) => {nix}/libcuda.so.1\n"
        f"\tlibnvidia-ml.so.1 (libc6,x86-64) => {site}/libnvidia-ml.so.1\n"
        f"\tlibcudart.so.12 (libc6,x86-64) => /elsewhere/libcudart.so.12\n"
    )
    paths = {"LD_LIBRARY_PATH": f"{cuda}:/usr/local/cuda/lib64:"}
    devices, libraries = sandbox.gpu_passthrough(str(dev), ldconfig, paths)
    assert devices == sorted(str(dev / n) for n in [*passed, "nvidia-caps"])
    assert libraries == sorted(map(str, (cuda, nix, site, tmp_path / "store"))), "not /usr"
    no_gpu = sandbox.gpu_passthrough(str(tmp_path / "no-gpu"), ldconfig, {})
    assert no_gpu == ([], []), "no GPU, nothing to pass"

    kernel = ["/env/bin/python", "-m", "ipykernel_launcher"]
    where = dict(workdir="/course/autograded/a", runtime="/tmp/grade-x", python_dirs=["/env"])
    given = dict(devices=devices, libraries=libraries, environ={"LD_LIBRARY_PATH": str(cuda)})
    command = sandbox.sandbox_command(kernel, memory=0, cpu_seconds=60, **where, **given)
    binds = [command[i : i + 3] for i, p in enumerate(command) if p in {"--dev-bind", "--ro-bind"}]
    same = [(kind, path) for kind, path, to in binds if path == to and path in devices + libraries]
    assert same == [("--ro-bind", d) for d in libraries] + [("--dev-bind", d) for d in devices]
    triples = zip(command, command[1:], command[2:], strict=False)
    assert ("--setenv", "LD_LIBRARY_PATH", str(cuda)) in triples
    assert not any(part.startswith("--as=") for part in command), "CUDA reserves more"
    with pytest.raises(RuntimeError, match="holds the course"):
        where = dict(workdir="/w", runtime="/r", memory=0, cpu_seconds=1, python_dirs=[])
        course = dict(libraries=["/home/me"], environ={}, course="/home/me/course")
        sandbox.sandbox_command(["python"], devices=devices, **where, **course)


def test_a_graded_cell_fails_by_raising_never_by_its_stderr():
    from nbformat.v4 import new_code_cell, new_output
    from nbgrader.utils import has_failed

    def cell(*outputs, graded=True):
        made = new_code_cell("assert double(2) == 4", outputs=list(outputs))
        grading = {"grade": graded, "solution": False, "grade_id": "test_double", "points": 1}
        made.metadata.nbgrader = grading
        return made

    warning = new_output("stream", name="stderr", text="falling back to the slow kernel\n")
    right = cell(new_output("stream", name="stdout", text="checked\n"), warning)
    assert has_failed(right), "nbgrader alone zeroes it"
    assert not has_failed(cells.stderr_kept_visible(right))
    assert right.outputs[1].text == "falling back to the slow kernel\n"
    error = new_output("error", ename="AssertionError", evalue="", traceback=[])
    wrong = cell(new_output("stream", name="stderr", text="warn\n"), error)
    assert has_failed(cells.stderr_kept_visible(wrong)) and wrong.outputs[0].name == "stderr"
    ungraded = cell(new_output("stream", name="stderr", text="a log line\n"), graded=False)
    kept = cells.stderr_kept_visible(ungraded).outputs[0].name
    assert kept == "stderr", "only graded cells are changed"


@pytest.mark.slow
def test_a_right_answer_that_warns_keeps_its_points_and_its_warning_shows(tmp_path):
    """Real autograde (the course's nbgrader_config.py, sandboxed where bubblewrap can be) of a
    small assignment: one submission whose right answer and wrong answer both warn and log."""
    import coursekit as ck

    ASSIGNMENT, NAME = ck.SANDBOX_ASSIGNMENT, ck.SANDBOX_NAME
    course = ck.sandbox_course(tmp_path)
    student = ck.read(course / "release" / ASSIGNMENT / NAME)
    warns = (
        "import logging, warnings\n\ndef {name}(x):\n"
        "    logging.getLogger('a.library').warning('falling back to the slow kernel')  # as a "
        "library logs\n"
        "    warnings.warn('this call is deprecated in a library', UserWarning)\n"
        "    return {body}\n"
    )
    answers = {"double": warns.format(name="double", body="2 * x")}  # right
    answers["square"] = warns.format(name="square", body="x**3")  # wrong
    answers["negate"] = "def negate(x):\n    return -x"
    ck.submit_as(course, "warns", ASSIGNMENT, NAME, ck.submission_from(student, answers))
    result = ck.nbgrader(course, "autograde", ASSIGNMENT, "--force", check=False)
    assert result.returncode == 0, result.stdout + result.stderr
    score = {g: v for g, (v, _, _) in ck.scores_of(course, ASSIGNMENT, NAME, "warns").items()}
    wanted = {"test_double": 1, "test_square": 0, "test_negate": 1}
    assert score == wanted, "the warning costs nothing; a wrong answer that warns still fails"
    graded = ck.read(course / "autograded" / "warns" / ASSIGNMENT / NAME)
    ids = [c.metadata.get("nbgrader", {}).get("grade_id") for c in graded.cells]
    (test,) = [c for c, i in zip(graded.cells, ids, strict=True) if i == "test_double"]
    shown = "".join(o.get("text", "") for o in test.outputs if o.get("name") == "stdout")
    assert "falling back to the slow kernel" in shown, test.outputs
    assert "UserWarning: this call is deprecated" in shown, test.outputs
    submitted = str(course / "submitted" / "warns" / ASSIGNMENT / NAME)
    validated = ck.nbgrader(course, "validate", submitted, check=False)
    failed = validated.stdout.split("The following cell failed:")
    assert "VALIDATION FAILED ON 1 CELL(S)!" in validated.stdout, validated.stdout
    agree = "the Validate button agrees with autograde: the wrong fails, the one that warns passes"
    assert len(failed) == 2 and "square(" in failed[1] and "double(" not in failed[1], (
        f"{agree}:\n{validated.stdout}"
    )
