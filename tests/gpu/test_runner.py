"""The GPU runner (coursetools.gpurun) on a CPU: it stops at once without CUDA; its report says
exactly what ran (what was skipped, each lesson's PyTorch and TensorFlow/DALI parts, every claim,
the claims that did not run, the GPU's state), and tells a false claim from a flaky one, a busy GPU
or the machine's problem. The GPU path itself runs on a GPU runner; the kit and the offline set-up
are in test_gpu_kit.py."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from coursetools.gpurun import catalogue, gpustate, preflight, render, report, run, runs
from coursetools.grading import cells, sandbox

ROOT = Path(__file__).resolve().parents[2]
no_driver = pytest.mark.skipif(
    preflight.nvml_gpus()[0] is not None, reason="this machine has an NVIDIA driver"
)


def _run(command, **env):
    start = time.monotonic()
    done = subprocess.run(
        command, cwd=ROOT, capture_output=True, text=True, timeout=60, env={**os.environ, **env}
    )
    return done, time.monotonic() - start


def test_stops_at_once_when_cuda_visible_devices_hides_every_gpu(tmp_path):
    command = [sys.executable, "-m", "coursetools.gpurun", "--artifacts", str(tmp_path)]
    done, seconds = _run(command, CUDA_VISIBLE_DEVICES="")
    assert done.returncode == 2, done.stdout + done.stderr
    assert seconds < 10, "the check comes before any work"
    assert "cannot run the GPU path" in done.stderr and "hides every GPU" in done.stderr
    assert "unset CUDA_VISIBLE_DEVICES" in done.stderr and "make test" in done.stderr
    assert not any(tmp_path.iterdir()), "nothing ran, so nothing is reported"


@no_driver
def test_stops_at_once_without_an_nvidia_driver(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "CUDA_VISIBLE_DEVICES"}
    start = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "coursetools.gpurun", "--artifacts", str(tmp_path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )
    assert done.returncode == 2 and time.monotonic() - start < 10
    assert "no NVIDIA driver" in done.stderr and "nvidia-smi" in done.stderr
    assert "`make test`" in done.stderr and "Traceback" not in done.stderr


@pytest.mark.skipif(shutil.which("make") is None, reason="needs make")
def test_make_test_gpu_checks_before_any_set_up():
    done, seconds = _run(
        ["make", "--no-print-directory", "test-gpu", f"PYTHON={sys.executable}"],
        CUDA_VISIBLE_DEVICES="-1",
    )
    assert done.returncode != 0 and seconds < 10
    assert "hides every GPU" in done.stderr and "pip install" not in done.stdout


def test_the_quick_check():
    no_lib = lambda: (None, "libnvidia-ml.so.1: cannot open shared object file")  # noqa: E731
    why, fix = preflight.quick_problem({}, nvml=no_lib)
    assert "no NVIDIA driver" in why and "libnvidia-ml" in why and "nvidia-smi" in fix
    assert "lists no GPU" in preflight.quick_problem({}, nvml=lambda: (0, ""))[0]
    assert preflight.quick_problem({"CUDA_VISIBLE_DEVICES": "0"}, nvml=lambda: (1, "")) is None
    hidden = preflight.quick_problem({"CUDA_VISIBLE_DEVICES": "-1"}, nvml=lambda: (8, ""))
    assert "hides every GPU" in hidden[0]


def test_the_preflight_is_the_standard_library_only():
    """`make test-gpu` runs it before anything is installed: no third-party module may load."""
    code = (
        "import sys; before = set(sys.modules)\n"
        "from coursetools.gpurun import run, preflight, gpustate, kit, runs, wheels\n"
        "third = {m.split('.')[0] for m in set(sys.modules) - before} - "
        "set(sys.stdlib_module_names)\n"
        "print(sorted(third - {'coursetools'}))"
    )
    done = subprocess.run(
        [sys.executable, "-S", "-c", code],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT / "tools")},
        timeout=60,
    )
    assert done.stdout.strip() == "[]", done.stdout + done.stderr


def _doctor(**torch_facts):
    torch_ = {"installed": True, "version": "2.14.1", "error": None, **torch_facts}
    return {"facts": {"torch": torch_}, "findings": []}


def test_the_pytorch_check_explains_each_usual_failure():
    assert preflight.cuda_problem(_doctor(cuda="13.0", cuda_available=True)) is None
    assert "not installed" in preflight.cuda_problem({"facts": {"torch": {"installed": False}}})[0]
    assert "CPU-only build" in preflight.cuda_problem(_doctor(cuda=None, cuda_available=False))[0]
    old_driver = _doctor(cuda="13.0", cuda_available=False)
    old_driver["findings"] = [
        {"level": "info", "problem": "TensorFlow is not installed", "fix": ""},
        {
            "level": "error",
            "problem": "The NVIDIA driver 535 supports CUDA up to 12.2",
            "fix": "Update the NVIDIA driver",
        },
    ]
    assert preflight.cuda_problem(old_driver) == (
        "The NVIDIA driver 535 supports CUDA up to 12.2",
        "Update the NVIDIA driver",
    )
    message = preflight.stop_message(("why", "fix"))
    assert "why: why." in message and "what to do: fix." in message


def test_the_machine_checks_say_the_problem_and_its_fix(tmp_path):
    """torchvision, /dev/shm, an externally managed Python, a compiler: each the machine's, with a
    fix."""
    missing = {
        "torch": "2.11.0+cu130",
        "cuda": "13.0",
        "error": "ModuleNotFoundError: No module named 'torchvision'",
    }
    found = preflight.torchvision_problem(missing)
    assert found["code"] == "torchvision" and "No module named 'torchvision'" in found["problem"]
    assert "torch 2.11.0+cu130" in found["fix"]
    cpu_only = {
        "torch": "2.11.0+cu130",
        "cuda": "13.0",
        "torchvision": "0.26.0+cpu",
        "vision_cuda": -1,
    }
    assert "no CUDA kernels" in preflight.torchvision_problem(cpu_only)["problem"]
    matched = {
        "torch": "2.11.0+cu130",
        "cuda": "13.0",
        "torchvision": "0.26.0",
        "vision_cuda": 13000,
    }
    assert preflight.torchvision_problem(matched) is None
    assert preflight.torchvision_problem({"error": "the probe did not run"}) is None, (
        "no torch: cuda_problem"
    )

    small = preflight.shm_problem(str(tmp_path), needed_mib=10**9)
    assert (
        small["code"] == "shm" and "--shm-size" in small["fix"] and "bus error" in small["problem"]
    )
    assert preflight.shm_problem(str(tmp_path), needed_mib=1) is None

    (tmp_path / "EXTERNALLY-MANAGED").write_text("[externally-managed]\n")
    managed = preflight.managed_problem(str(tmp_path), prefix="/usr", base="/usr")
    assert "externally managed" in managed["problem"] and "--system-site-packages" in managed["fix"]
    assert preflight.managed_problem(str(tmp_path), prefix="/venv", base="/usr") is None, (
        "a venv may"
    )

    nothing = preflight.compiler_problem({}, which=lambda name: None, include=str(tmp_path))
    assert "no C compiler" in nothing["problem"] and "Python.h" in nothing["problem"]
    (tmp_path / "Python.h").touch()
    assert (
        preflight.compiler_problem({}, which=lambda name: f"/usr/bin/{name}", include=str(tmp_path))
        is None
    )

    problems = preflight.machine_problems(
        missing, shm=lambda: small, managed=lambda: None, compiler=lambda: None
    )
    assert [p["code"] for p in problems] == ["torchvision", "shm"]
    assert "jpeg_dataset(" in problems[0]["needles"] and "num_workers" in problems[1]["needles"]


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
    assert preflight.probe_torchvision(str(python)) == {
        "torch": "9.9.9+cu999",
        "cuda": "99.9",
        "torchvision": "8.8.8+cu999",
        "vision_cuda": 99090,
    }
    (site / "torchvision" / "extension.py").write_text("raise OSError('undefined symbol')\n")
    assert preflight.probe_torchvision(str(python))["error"] == "OSError: undefined symbol"
    assert preflight.probe_torchvision("/nonexistent/python")["error"].startswith(
        "the probe did not run"
    )


def test_notebook_uses_and_parts(tmp_path):
    def notebook(*sources):
        path = tmp_path / f"nb{len(sources)}.ipynb"
        cells = [{"cell_type": "code", "source": s} for s in sources] + [
            {"cell_type": "markdown", "source": "we do not `import_dali()` here"}
        ]
        path.write_text(json.dumps({"cells": cells}))
        return path

    assert runs.notebook_uses(notebook("tf = gpucourse.import_tensorflow()\n")) == ["tensorflow"]
    two = notebook(["import torch\n", "x = 1"], "dali = gpucourse.import_dali()")
    assert runs.notebook_uses(two) == ["dali"] and runs.cell_parts(two) == ["PyTorch", "DALI"]
    assert runs.notebook_uses(notebook("import torch")) == []
    setup = notebook("# Set-up: pip install tensorflow there\n", "model = tf.keras.Sequential()")
    assert runs.cell_parts(setup) == ["PyTorch", "TensorFlow"], "the set-up cell is everyone's"
    lesson = sorted((ROOT / "solutions").glob("*/*.ipynb"))[0]
    assert "tensorflow" in runs.notebook_uses(lesson), "lesson 01 shows TensorFlow's device list"
    assert "TensorFlow" in runs.cell_parts(lesson) and runs.cell_parts(lesson)[0] == "PyTorch"


def test_the_claims_catalogue_reads_the_lessons_claims(tmp_path):
    path = tmp_path / "nb.ipynb"
    cells = [
        "%matplotlib inline\nfrom gpucourse import claims\n",
        "claims.claim('a literal', 1.0, device=device, at_least=0.5)\n"
        "gpucourse.claims.claim(f'{label}: fast', x, device=device, at_most=1)\n",
        "claims.claim(text, 2.0, device=device, at_least=1)\nclaims.needs('two GPUs', False, "
        "device=d)",
        "with tf.device('/gpu:0'):\n    claims.claim('tf.data is fast', 2.0, device=device, "
        "at_least=1)",
    ]
    path.write_text(json.dumps({"cells": [{"cell_type": "code", "source": c} for c in cells]}))
    found = catalogue.lesson_claims(path)
    assert [(e["cell"], e["part"], e["text"]) for e in found] == [
        (1, "PyTorch", "a literal"),
        (1, "PyTorch", "{label}: fast"),
        (2, "PyTorch", "the claim computed in code cell 2 (text)"),
        (3, "TensorFlow", "tf.data is fast"),
    ]
    recorded = [
        {"kind": "claim", "claim": "pinned: fast"},
        {"kind": "claim", "claim": "made up at run time"},
    ]
    ran, missing = catalogue.match(found, recorded)
    assert [e["text"] for e in missing] == ["a literal", "tf.data is fast"]
    assert len(ran) == 2 and catalogue.part_of(found, "tf.data is fast") == "TensorFlow"
    every = [
        e
        for nb in sorted((ROOT / "solutions").glob("*/*.ipynb"))
        for e in catalogue.lesson_claims(nb)
    ]
    assert len(every) >= 20, "the lessons' claims are found"


JUNIT = """<?xml version="1.0" encoding="utf-8"?><testsuites><testsuite name="pytest" tests="4">
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
</testsuite></testsuites>"""  # noqa: E501 (nbval's JUnit XML, as it writes it)


def test_parse_junit(tmp_path):
    path = tmp_path / "run.xml"
    path.write_text(JUNIT)
    cases = runs.parse_junit(path)
    assert [c["outcome"] for c in cases] == ["passed", "failed", "skipped", "error", "failed"]
    assert cases[1]["name"] == "Cell 1", (
        "nbval's message: the exception, without colour codes or the cell's input"
    )
    assert cases[1]["message"] == "RuntimeError: GPUCOURSE_REQUIRE_GPU=1 forbids the CPU fallback"
    assert cases[2]["message"] == "needs CUDA" and cases[3]["message"] == "kernel died"
    assert cases[4]["message"] == "AssertionError: pinned 9 GB/s"
    assert cases[2]["id"] == "tests.test_gpu::test_pinned" and cases[3]["id"] == "Cell 3"
    assert cases[0]["seconds"] == 2.5
    assert runs.parse_junit(tmp_path / "missing.xml") == []


FACTS = {
    "python": "3.11.9",
    "platform": "Linux",
    "gpucourse": "0.1.0",
    "cuda_visible_devices": None,
    "driver": {
        "found": True,
        "version": "570.86",
        "cuda": "12.8",
        "gpus": [
            {
                "index": 0,
                "name": "NVIDIA H100 80GB HBM3",
                "memory_gib": 79.1,
                "compute_capability": "9.0",
            }
        ],
    },
    "torch": {
        "installed": True,
        "version": "2.14.1",
        "cuda": "12.8",
        "cudnn": 91000,
        "cuda_available": True,
        "devices": ["NVIDIA H100 80GB HBM3"],
        "error": None,
    },
    "tensorflow": {"installed": False, "version": None, "error": None},
    "dali": {"installed": False, "version": None, "error": None},
}


def _cells(*outcomes, message="boom"):
    return [
        {
            "id": f"Cell {i}",
            "name": f"Cell {i}",
            "outcome": o,
            "seconds": 1.0,
            "message": message * (o != "passed"),
        }
        for i, o in enumerate(outcomes)
    ]


def _notebook(
    lesson,
    outcomes=("passed", "passed"),
    uses=("tensorflow",),
    returncode=0,
    message="boom",
    **extra,
):
    return {
        "notebook": f"solutions/{lesson}/{lesson[3:]}.ipynb",
        "lesson": lesson,
        "uses": list(uses),
        "returncode": returncode,
        "timed_out": False,
        "seconds": 42.0,
        "cases": _cells(*outcomes, message=message),
        "log": f"logs/{lesson}.log",
        **extra,
    }


def _claim(text, passed, measured=1.0, bound="at least 1.5"):
    return {
        "kind": "claim",
        "claim": text,
        "measured": measured,
        "unit": "x",
        "bound": bound,
        "passed": passed,
        "device": "cuda:0",
        "source": "the lesson's arithmetic",
    }


GPU_TESTS = {
    "returncode": 0,
    "timed_out": False,
    "seconds": 12.0,
    "cases": [
        {
            "id": "tests.test_gpu::test_a",
            "name": "test_a",
            "outcome": "passed",
            "seconds": 1.0,
            "message": "",
        }
    ],
}
BENCH = {
    "name": "NVIDIA H100 80GB HBM3",
    "known_as": "H100 SXM",
    "rows": [
        {
            "key": "bf16",
            "what": "matmul bf16",
            "value": 800.0,
            "unit": "TFLOP/s",
            "peak": 989.5,
            "ratio": 0.81,
            "note": "",
        }
    ],
}
WITH_TF = {
    **FACTS,
    "tensorflow": {"installed": True, "version": "2.21.0", "gpus": 1, "error": None},
}


def _build(facts, notebooks, gpu_tests=GPU_TESTS, grading=GPU_TESTS, **run_context):
    built = report.build_report(
        facts, notebooks, gpu_tests, BENCH, {"commit": "abc1234"}, grading, run_context
    )
    json.dumps(built)
    return built, render.render_markdown(built)


def test_report_a_missing_framework_leaves_its_part_not_validated_and_shows_the_pytorch_part():
    tf_cells = ["PyTorch", "TensorFlow"]
    notebooks = [
        _notebook("01_verify_gpu", parts=tf_cells),
        _notebook("02_tensors_on_device", uses=()),
    ]
    built, markdown = _build(FACTS, notebooks)
    assert built["status"] == "partial" and built["problems"] == [] and built["skipped"] == []
    first, second = built["notebooks"]
    assert first["result"] == "not validated" and second["result"] == "passed"
    assert first["parts"]["PyTorch"]["result"] == "passed", "the PyTorch part ran and passed"
    assert first["parts"]["TensorFlow"] == {
        "result": "not validated",
        "failed_cells": 0,
        "claims": "0/0",
        "not_validated": ["TensorFlow (not installed)"],
    }
    assert built["not_validated_on_gpu"] == [
        {"what": "TensorFlow", "why": "not installed", "where": [first["notebook"]]}
    ]
    env = built["environment"]
    assert env["device"] == "NVIDIA H100 80GB HBM3" and env["compute_capability"] == "9.0"
    assert env["driver"] == "570.86" and env["torch"] == "2.14.1" and env["commit"] == "abc1234"
    assert "NOT VALIDATED ON GPU" in markdown and "- TensorFlow: not installed" in markdown
    assert (
        f"| {first['notebook']} | not validated | 42.0 s | passed | not validated: TensorFlow (not "
        "installed) | - | - |"
    ) in markdown
    assert "81%" in markdown and "# GPU test report: PASSED: every" not in markdown


def test_report_everything_validated_and_run_is_passed():
    built, markdown = _build(WITH_TF, [_notebook("01_verify_gpu")], all_lessons=["01_verify_gpu"])
    assert built["status"] == "passed" and built["notebooks"][0]["result"] == "passed"
    assert markdown.startswith("# GPU test report: PASSED: every lesson (1)")
    assert "nothing: every part ran on the GPU" in markdown


def test_report_a_skipped_grading_is_named_in_the_headline_never_passed():
    built, markdown = _build(
        WITH_TF, [_notebook("01_verify_gpu")], grading=None, grading_skipped="--no-grading"
    )
    assert built["status"] == "partial" and built["skipped"] == [
        "grading on the GPU not run (--no-grading)"
    ]
    assert "NOT RUN: grading on the GPU not run (--no-grading)" in markdown.splitlines()[0]
    assert "PASSED: every" not in markdown


def test_report_a_subset_of_lessons_names_the_lessons_not_run():
    every = ["01_verify_gpu", "02_tensors_on_device", "09_make_it_fast"]
    built, markdown = _build(WITH_TF, [_notebook("09_make_it_fast")], all_lessons=every)
    assert built["status"] == "partial"
    assert built["skipped"] == ["2 of 3 lessons not run (01_verify_gpu, 02_tensors_on_device)"]
    assert (
        "NOT RUN: 2 of 3 lessons not run" in markdown.splitlines()[0]
        and "PASSED: every" not in markdown
    )


@pytest.mark.parametrize("installed_set", ["cpu", None, "gpu"])
def test_report_tensorflow_without_gpu_support(installed_set):
    """Its cells skip themselves in strict mode: not validated on GPU, except in the GPU set (a
    failure)."""
    tf = {"installed": True, "version": "2.21.0", "is_cuda_build": True, "gpus": 0, "error": None}
    built, _ = _build(
        {**FACTS, "course_set": installed_set, "tensorflow": tf}, [_notebook("05_dali_pipelines")]
    )
    assert built["not_validated_on_gpu"][0]["why"].startswith(
        "installed without GPU support: no CUDA"
    )
    assert built["notebooks"][0]["result"] == "not validated", (
        "never failed for a framework without its GPU"
    )
    if installed_set == "gpu":
        assert built["status"] == "failed" and "TensorFlow sees no GPU" in built["problems"][0]
    else:
        assert built["status"] == "partial" and built["problems"] == []


def test_report_a_failing_tensorflow_cell_still_fails_its_part():
    notebooks = [
        _notebook(
            "01_verify_gpu", ("passed", "failed"), returncode=1, parts=["PyTorch", "TensorFlow"]
        )
    ]
    built, markdown = _build(WITH_TF, notebooks)
    row = built["notebooks"][0]
    assert built["status"] == "failed" and row["result"] == "failed"
    assert row["failed_cells"] == ["Cell 1: boom"]
    assert (
        row["parts"]["TensorFlow"]["result"] == "failed"
        and row["parts"]["PyTorch"]["result"] == "passed"
    )
    assert "## Problems" in markdown


def test_report_failures_timeouts_and_skips():
    notebooks = [
        _notebook("01_verify_gpu", uses=(), timed_out=True, returncode=None),
        _notebook("02_tensors_on_device", outcomes=(), uses=(), returncode=5),
    ]
    skipped = {
        **GPU_TESTS,
        "cases": GPU_TESTS["cases"]
        + [
            {
                "id": "tests.test_gpu::test_b",
                "name": "test_b",
                "outcome": "skipped",
                "seconds": 0,
                "message": "no CUDA",
            }
        ],
    }
    built = report.build_report(FACTS, notebooks, skipped, {"error": "CUDA error: out of memory"})
    assert [row["result"] for row in built["notebooks"]] == ["timeout", "failed"], (
        "no cells ran: no pass"
    )
    assert built["status"] == "failed" and any(p.startswith("bench:") for p in built["problems"])
    assert built["gpu_tests"]["skipped"] == ["tests.test_gpu::test_b: no CUDA"]
    assert {"what": "gpu test: tests.test_gpu::test_b", "why": "skipped: no CUDA", "where": []} in (
        built["not_validated_on_gpu"]
    )
    none_ran = report.build_report(FACTS, [], {**GPU_TESTS, "returncode": 5, "cases": []}, None)
    assert none_ran["gpu_tests"]["result"] == "failed" and none_ran["status"] == "failed"


def test_report_a_false_claim_fails_its_lesson_a_flaky_one_is_named_flaky():
    false = _notebook(
        "07_troubleshooting_oom",
        uses=("claims",),
        claims=[
            _claim("checkpointing peaks lower", False, 0.9, "at most 0.8"),
            _claim("accumulation peaks lower", True, 0.5, "at most 0.65"),
        ],
    )
    flaky = _notebook(
        "08_profile_and_compile",
        uses=("claims",),
        claims=[_claim("the fast loop is faster", False)],
        rerun={"claims": [_claim("the fast loop is faster", True, 1.6)]},
    )
    built, markdown = _build(WITH_TF, [false, flaky])
    oom, profile = built["notebooks"]
    assert oom["result"] == profile["result"] == "failed" and built["status"] == "failed"
    assert [c["verdict"] for c in oom["claims"]] == ["false", "pass"], (
        "the claim after a false one is there"
    )
    assert [c["verdict"] for c in profile["claims"]] == ["flaky"]
    assert built["problems"][1] == (
        f"{profile['notebook']}: failed (claim flaky: the fast loop is faster: "
        "1x, expected at least 1.5)"
    )
    assert (
        f"| {oom['notebook']} | checkpointing peaks lower | 0.9x | at most 0.8 | FAIL | the "
        "lesson's "
        "arithmetic |"
    ) in markdown
    assert (
        f"| {oom['notebook']} | accumulation peaks lower | 0.5x | at most 0.65 | PASS |" in markdown
    )
    assert "FAIL, then PASS when run again: FLAKY" in markdown


def test_report_a_false_claim_on_a_busy_gpu_is_inconclusive():
    def fake_reader():
        class Reader:
            source = "fake"

            def count(self):
                return 1

            def read(self, index):
                return {
                    "name": "NVIDIA T4",
                    "utilization_percent": 87,
                    "sm_clock_mhz": 585,
                    "sm_clock_max_mhz": 1590,
                    "power_limit_w": 70.0,
                    "mig": None,
                    "processes": [{"pid": 4242, "used_mib": 9000}],
                }

            def close(self):
                pass

        return Reader(), ""

    before = gpustate.gpu_state(fake_reader)
    assert (
        before["gpus"][0]["processes"] == [{"pid": 4242, "used_mib": 9000}]
        and before["source"] == "fake"
    )
    assert gpustate.busy_reasons(before) == [
        "GPU 0 (NVIDIA T4): 1 other compute process(es) on it",
        "GPU 0 (NVIDIA T4): 87% utilised before the run",
    ]
    nb = _notebook("04_mixed_precision", uses=(), claims=[_claim("AMP is faster", False)])
    built, markdown = _build(
        WITH_TF, [nb], gpu_before=before, gpu_after={"error": "NVML: not read"}
    )
    assert built["notebooks"][0]["result"] == "inconclusive" and built["status"] == "inconclusive"
    assert built["notebooks"][0]["claims"][0]["verdict"] == "busy"
    assert markdown.startswith("# GPU test report: INCONCLUSIVE")
    assert "| before | 0: NVIDIA T4 | 87% | 585 / 1590 MHz | 70.0 W | 1 | - |" in markdown
    assert (
        "| after | not read: NVML: not read |" in markdown and "BUSY: GPU 0 (NVIDIA T4)" in markdown
    )
    idle = {
        "gpus": [
            {
                "index": 0,
                "name": "H100",
                "utilization_percent": 0,
                "processes": [],
                "mig": "disabled",
            }
        ]
    }
    assert gpustate.busy_reasons(idle) == [] and gpustate.gpu_state(
        lambda: (None, "no driver")
    ) == {"error": "no driver"}


def test_the_gpu_state_through_nvidia_ml_py():
    class NotSupported(Exception):
        pass

    class FakeNvml:
        def __getattr__(self, name):
            values = {
                "nvmlDeviceGetCount": 1,
                "nvmlDeviceGetHandleByIndex": "h0",
                "nvmlDeviceGetName": b"NVIDIA H100 80GB HBM3",
                "nvmlDeviceGetClockInfo": 1980,
                "nvmlDeviceGetMaxClockInfo": 1980,
                "nvmlDeviceGetPowerManagementLimit": 700000,
                "nvmlDeviceGetComputeRunningProcesses": [],
                "nvmlInit": None,
                "nvmlShutdown": None,
            }
            if name == "nvmlDeviceGetUtilizationRates":
                return lambda *a: type("Rates", (), {"gpu": 3, "memory": 1})
            if name == "nvmlDeviceGetMigMode":
                return lambda *a: (_ for _ in ()).throw(NotSupported())
            return lambda *a: values[name]

    state = gpustate.gpu_state(lambda: (gpustate.PynvmlReader(FakeNvml()), ""))
    assert state["source"] == "nvidia-ml-py" and state["gpus"] == [
        {
            "index": 0,
            "name": "NVIDIA H100 80GB HBM3",
            "utilization_percent": 3,
            "sm_clock_mhz": 1980,
            "sm_clock_max_mhz": 1980,
            "power_limit_w": 700.0,
            "processes": [],
            "mig": None,
        }
    ]
    assert gpustate.busy_reasons(state) == [], "a GPU without MIG support is not sliced"


def test_report_a_missing_package_or_a_small_shm_is_the_machines_problem():
    vision = _notebook(
        "03_batching_pipelines",
        ("passed", "failed"),
        uses=(),
        returncode=1,
        message="ModuleNotFoundError: No module named 'torchvision'",
    )
    loader = _notebook(
        "09_make_it_fast",
        ("failed",),
        uses=(),
        returncode=1,
        code="DataLoader(num_workers=8)",
        message="RuntimeError: DataLoader worker (pid 77) is killed by signal: Bus error.",
    )
    small = preflight.shm_problem("/dev/shm", needed_mib=10**9)
    built, markdown = _build(
        WITH_TF, [vision, loader], machine=[{**small, **preflight.APPLIES["shm"]}]
    )
    assert [row["result"] for row in built["notebooks"]] == ["machine", "machine"]
    assert built["status"] == "inconclusive" and built["problems"] == []
    assert (
        built["notebooks"][0]["machine_cause"]
        == "the package torchvision is missing on this machine"
    )
    assert "--shm-size" in built["notebooks"][1]["machine_cause"]
    assert "## The machine's problems (not the lessons')" in markdown
    assert "the machine's problem, not the lesson's: the package torchvision is missing" in markdown
    plain = _notebook(
        "02_tensors_on_device",
        ("failed",),
        uses=(),
        returncode=1,
        code="x = 1",
        message="AssertionError: wrong",
    )
    assert (
        _build(WITH_TF, [plain], machine=[{**small, **preflight.APPLIES["shm"]}])[0]["status"]
        == "failed"
    )


def test_report_lists_the_claims_that_did_not_run_by_name():
    entries = [
        {"cell": 3, "part": "PyTorch", "text": "pinned is faster", "pattern": "pinned is faster"},
        {"cell": 5, "part": "PyTorch", "text": "{n} GB/s", "pattern": ".*? GB/s"},
        {"cell": 9, "part": "TensorFlow", "text": "tf.data wins", "pattern": "tf\\.data wins"},
    ]
    unmeasured = {"kind": "claim", "claim": "4 GB/s", "measured": None, "checked": False}
    claims = [_claim("pinned is faster", True), unmeasured]  # claim(..., None): no measurement
    nb = _notebook("02_tensors_on_device", uses=("claims",), claims=claims)
    built, markdown = _build(WITH_TF, [nb], catalogue={"02_tensors_on_device": entries})
    row = built["notebooks"][0]
    assert row["claims_not_run"] == ["{n} GB/s", "tf.data wins"] and row["result"] == "passed"
    assert row["would_check"] == []
    assert (
        f"- {row['notebook']}: {{n}} GB/s" in markdown and "## Claims that did not run" in markdown
    )
    none = _notebook("02_tensors_on_device", uses=("claims",))
    built, _ = _build(WITH_TF, [none], catalogue={"02_tensors_on_device": entries})
    assert built["notebooks"][0]["not_validated_on_gpu"] == [
        "the lesson's GPU claims (none ran on the GPU: no claim was recorded)"
    ]


def test_a_lesson_whose_gpu_path_this_machine_cannot_run_is_not_validated():
    """The runner's own checks: DALI's TensorFlow plugin, two GPUs, a C compiler."""
    lessons = [
        _notebook("05_dali_pipelines", uses=("tensorflow", "dali", "dali-tf")),
        _notebook("06_data_parallel", uses=("two-gpus",)),
        _notebook("08_profile_and_compile", uses=("compiler",)),
    ]
    rich = {
        **WITH_TF,
        "dali": {"installed": True, "version": "2.4.0", "error": None},
        "dali_tf_plugin": True,
        "torch": {**FACTS["torch"], "devices": ["NVIDIA H100 80GB HBM3"] * 2},
        "c_compiler": "/usr/bin/gcc",
        "python_headers": True,
    }
    assert _build(rich, lessons)[0]["status"] == "passed"
    poor = {**rich, "dali_tf_plugin": False, "torch": {**FACTS["torch"]}, "c_compiler": None}
    built, markdown = _build(poor, lessons)
    assert [row["result"] for row in built["notebooks"]] == ["not validated"] * 3
    assert built["status"] == "partial"
    why = {item["what"]: item["why"] for item in built["not_validated_on_gpu"]}
    assert why["DALI's TensorFlow plugin"].startswith(
        "not installed: it compiles against TensorFlow"
    )
    assert why["two GPUs"].startswith("1 GPU visible to PyTorch: NCCL, DDP")
    assert why["a C compiler"].startswith(
        "no C compiler ($CC, gcc or clang): Inductor and Triton build"
    )
    assert "PASSED: every" not in markdown
    stated = {
        "kind": "precondition",
        "what": "a C compiler and Python.h for Inductor's Triton kernels",
        "met": False,
        "why": "no compiler on this machine",
        "device": "cuda:0",
    }
    own = _notebook("08_profile_and_compile", uses=("compiler",), claims=[stated])
    row = _build(poor, [own])[0]["notebooks"][0]
    assert row["not_validated_on_gpu"] == [
        "a C compiler and Python.h for Inductor's Triton kernels (no compiler on this machine)"
    ], "the lesson's own line, said once"


def test_a_false_claim_is_recorded_and_the_claims_after_it_still_run(tmp_path):
    """A real nbval run of a one-cell lesson, as the runner runs it: strict mode, its claims file,
    the kernel started by the runner's start-up file. The false claim does not stop the cell; the
    lesson fails from its claims file; the true claim after it is measured and recorded."""
    folder = tmp_path / "07_troubleshooting_oom"
    folder.mkdir()
    cell = (
        "from gpucourse import claims\ndevice = 'cuda:0'  # a CUDA device string: the claims "
        "check\n"
        "claims.claim('checkpointing peaks lower', 0.9, device=device, at_most=0.8)\n"
        "claims.claim('accumulation peaks lower', 0.5, device=device, at_most=0.65)\n"
        "claims.needs('two GPUs', False, device=device, why='1 GPU visible')\n"
    )
    notebook = folder / "troubleshooting_oom.ipynb"
    notebook.write_text(
        json.dumps(
            {
                "cells": [
                    {
                        "cell_type": "code",
                        "source": cell,
                        "metadata": {},
                        "outputs": [],
                        "execution_count": None,
                    }
                ],
                "metadata": {
                    "kernelspec": {
                        "name": "python3",
                        "display_name": "Python 3",
                        "language": "python",
                    }
                },
                "nbformat": 4,
                "nbformat_minor": 5,
            }
        )
    )
    artifacts = tmp_path / "artifacts"
    (artifacts / "logs").mkdir(parents=True)
    (artifacts / "claims").mkdir()
    (artifacts / "claims" / "07_troubleshooting_oom.jsonl").write_text(
        '{"kind": "claim", "passed": true}\n'
    )
    result = runs.run_lesson(notebook, artifacts, 120)
    log = (artifacts / "logs" / "07_troubleshooting_oom.log").read_text()
    assert [c["outcome"] for c in result["cases"]] == ["passed"], log
    assert [(e["kind"], e.get("claim") or e.get("what")) for e in result["claims"]] == [
        ("claim", "checkpointing peaks lower"),
        ("claim", "accumulation peaks lower"),
        ("precondition", "two GPUs"),
    ], "one fresh file a lesson; every claim recorded"
    built = report.build_report(FACTS, [result], GPU_TESTS, BENCH)
    row = built["notebooks"][0]
    assert row["result"] == "failed" and [c["verdict"] for c in row["claims"]] == ["false", "pass"]
    assert row["not_validated_on_gpu"] == ["two GPUs (1 GPU visible)"]
    assert built["problems"][0].endswith(
        "(claim false: checkpointing peaks lower: 0.9, expected at most 0.8)"
    )


def test_main_wires_lessons_claims_reruns_gpu_tests_grading_and_the_report_together(
    tmp_path, monkeypatch
):
    """main() with every run faked: what it asks pytest for, the rerun of a lesson whose claim
    failed, and the report files it writes."""
    calls = []

    def fake_pytest(args, junit, log, timeout, rehearsal=False, **env):
        calls.append((args, env))
        if "GPUCOURSE_CLAIMS" in env and "07_" in args[0]:
            claim = _claim("checkpointing at most 80% of the peak", False, 0.9, "at most 0.8")
            Path(env["GPUCOURSE_CLAIMS"]).write_text(json.dumps({**claim, "unit": ""}) + "\n")
        assert env.get("GPUCOURSE_CLAIMS_DEFER", "1") == "1" and not rehearsal
        return {
            "returncode": 0,
            "timed_out": False,
            "seconds": 1.0,
            "log": str(log),
            "cases": [{"id": "t", "name": "t", "outcome": "passed", "seconds": 1.0, "message": ""}],
        }

    monkeypatch.setattr(preflight, "quick_problem", lambda: None)
    monkeypatch.setattr(preflight, "machine_problems", lambda: [])
    monkeypatch.setattr(runs, "doctor_report", lambda: {"facts": FACTS})
    monkeypatch.setattr(runs, "run_pytest", fake_pytest)
    monkeypatch.setattr(runs, "run_bench", lambda artifacts: BENCH)
    monkeypatch.setattr(gpustate, "gpu_state", lambda: {"error": "faked"})
    assert run.main(["--artifacts", str(tmp_path)]) == 1, "lesson 07's claim is false"
    lessons = [args for args, env in calls if "GPUCOURSE_CLAIMS" in env]
    every = sorted((ROOT / "solutions").glob("*/*.ipynb"))
    assert len(lessons) == len(every) + 1, "lesson 07 ran twice: its claim failed"
    assert [args for args, env in calls if "GPUCOURSE_CLAIMS" not in env] == [
        ["tests/gpu/test_on_cuda.py", "-m", "gpu", "-k", "not autograde"],
        ["tests/gpu/test_on_cuda.py", "-m", "gpu", "-k", "autograde"],
    ]
    built = json.loads((tmp_path / "gpu-report.json").read_text())
    assert built["status"] == "failed" and built["grading"]["result"] == "passed"
    assert built["environment"]["executable"] == sys.executable
    markdown = (tmp_path / "gpu-report.md").read_text()
    assert (
        "| checkpointing at most 80% of the peak | 0.9 | at most 0.8 | FAIL | the lesson's "
        "arithmetic |" in (markdown)
    )
    assert "## Grading on the GPU (nbgrader autograde, expected scores): passed" in markdown

    calls.clear()
    assert run.main(["02_tensors_on_device", "--no-grading", "--artifacts", str(tmp_path)]) == 0
    assert calls[-1][0][-1] == "not autograde", "no grading run"
    built = json.loads((tmp_path / "gpu-report.json").read_text())
    assert built["status"] == "partial" and len(built["skipped"]) == 2, built["skipped"]


# ---- grading on a GPU: the sandbox passes the GPU through, and a warning never costs a right
# answer its points ----
def test_the_sandbox_passes_the_gpus_and_their_driver_libraries_through(tmp_path):
    dev = tmp_path / "dev"
    for name in (
        "nvidia0",
        "nvidia1",
        "nvidiactl",
        "nvidia-uvm",
        "nvidia-uvm-tools",
        "nvidia-modeset",
        "dxg",
        "null",
        "nvme0n1",
        "fb0",
    ):
        (dev / name).parent.mkdir(parents=True, exist_ok=True)
        (dev / name).touch()
    (dev / "nvidia-caps").mkdir()
    site, nix, cuda = (
        tmp_path / d for d in ("site/driver/lib", "run/opengl-driver/lib", "cluster/cuda/lib64")
    )
    for folder in (site, nix, cuda):
        folder.mkdir(parents=True)
    (tmp_path / "store").mkdir()
    (tmp_path / "store" / "libcuda.so.550.54").touch()
    (nix / "libcuda.so.1").symlink_to(
        tmp_path / "store" / "libcuda.so.550.54"
    )  # NixOS: a link into the store
    ldconfig = (
        f"\tlibcuda.so.1 (libc6,x86-64) => /usr/lib/x86_64-linux-gnu/libcuda.so.1\n"
        f"\tlibcuda.so.1 (libc6,x86-64) => {nix}/libcuda.so.1\n"
        f"\tlibnvidia-ml.so.1 (libc6,x86-64) => {site}/libnvidia-ml.so.1\n"
        f"\tlibcudart.so.12 (libc6,x86-64) => /elsewhere/libcudart.so.12\n"
    )
    devices, libraries = sandbox.gpu_passthrough(
        str(dev), ldconfig, {"LD_LIBRARY_PATH": f"{cuda}:/usr/local/cuda/lib64:"}
    )
    assert devices == [
        str(dev / n)
        for n in (
            "dxg",
            "nvidia-caps",
            "nvidia-modeset",
            "nvidia-uvm",
            "nvidia-uvm-tools",
            "nvidia0",
            "nvidia1",
            "nvidiactl",
        )
    ]
    assert libraries == sorted(map(str, (cuda, nix, site, tmp_path / "store"))), (
        "/usr is in the sandbox already"
    )
    assert sandbox.gpu_passthrough(str(tmp_path / "no-gpu"), ldconfig, {}) == ([], []), (
        "no GPU, nothing to pass"
    )

    command = sandbox.sandbox_command(
        ["/env/bin/python", "-m", "ipykernel_launcher"],
        workdir="/course/autograded/a",
        runtime="/tmp/grade-x",
        memory=0,
        cpu_seconds=60,
        python_dirs=["/env"],
        devices=devices,
        libraries=libraries,
        environ={"LD_LIBRARY_PATH": str(cuda)},
    )
    binds = [
        tuple(command[i : i + 3])
        for i, part in enumerate(command)
        if part in {"--dev-bind", "--ro-bind"}
    ]
    assert [
        (kind, path)
        for kind, path, same in binds
        if path == same and (path in devices or path in libraries)
    ] == ([("--ro-bind", d) for d in libraries] + [("--dev-bind", d) for d in devices])
    assert ("--setenv", "LD_LIBRARY_PATH", str(cuda)) in zip(
        command, command[1:], command[2:], strict=False
    )
    assert not any(part.startswith("--as=") for part in command), (
        "no address-space limit with a GPU (CUDA reserves more)"
    )
    with pytest.raises(RuntimeError, match="holds the course"):
        sandbox.sandbox_command(
            ["python"],
            workdir="/w",
            runtime="/r",
            memory=0,
            cpu_seconds=1,
            python_dirs=[],
            devices=devices,
            libraries=["/home/me"],
            environ={},
            course="/home/me/course",
        )


def test_a_graded_cell_fails_by_raising_never_by_its_stderr():
    from nbformat.v4 import new_code_cell, new_output
    from nbgrader.utils import has_failed

    def cell(*outputs, graded=True):
        made = new_code_cell("assert double(2) == 4", outputs=list(outputs))
        made.metadata.nbgrader = {
            "grade": graded,
            "solution": False,
            "grade_id": "test_double",
            "points": 1,
        }
        return made

    warning = new_output("stream", name="stderr", text="falling back to the slow kernel\n")
    right = cell(new_output("stream", name="stdout", text="checked\n"), warning)
    assert has_failed(right), "nbgrader alone zeroes it"
    assert (
        not has_failed(cells.stderr_kept_visible(right))
        and right.outputs[1].text == "falling back to the slow kernel\n"
    )
    wrong = cell(
        new_output("stream", name="stderr", text="warn\n"),
        new_output("error", ename="AssertionError", evalue="", traceback=[]),
    )
    assert has_failed(cells.stderr_kept_visible(wrong)) and wrong.outputs[0].name == "stderr"
    ungraded = cell(new_output("stream", name="stderr", text="a log line\n"), graded=False)
    assert cells.stderr_kept_visible(ungraded).outputs[0].name == "stderr", (
        "only graded cells are changed"
    )


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
    answers = {
        "double": warns.format(name="double", body="2 * x"),  # right
        "square": warns.format(name="square", body="x**3"),  # wrong
        "negate": "def negate(x):\n    return -x",
    }
    ck.submit_as(course, "warns", ASSIGNMENT, NAME, ck.submission_from(student, answers))
    result = ck.nbgrader(course, "autograde", ASSIGNMENT, "--force", check=False)
    assert result.returncode == 0, result.stdout + result.stderr
    score = {g: v for g, (v, _, _) in ck.scores_of(course, ASSIGNMENT, NAME, "warns").items()}
    assert score == {"test_double": 1, "test_square": 0, "test_negate": 1}, (
        "the warning costs nothing; a wrong answer that warns still fails"
    )
    graded = ck.read(course / "autograded" / "warns" / ASSIGNMENT / NAME)
    (test,) = [
        c for c in graded.cells if c.metadata.get("nbgrader", {}).get("grade_id") == "test_double"
    ]
    shown = "".join(o.get("text", "") for o in test.outputs if o.get("name") == "stdout")
    assert (
        "falling back to the slow kernel" in shown
        and "UserWarning: this call is deprecated" in shown
    ), test.outputs
    validated = ck.nbgrader(
        course, "validate", str(course / "submitted" / "warns" / ASSIGNMENT / NAME), check=False
    )
    failed = validated.stdout.split("The following cell failed:")
    assert "VALIDATION FAILED ON 1 CELL(S)!" in validated.stdout and len(failed) == 2, (
        validated.stdout
    )
    assert "square(" in failed[1] and "double(" not in failed[1], (
        "the Validate button agrees with autograde: the wrong answer fails, the one that warns "
        f"passes:\n{validated.stdout}"
    )
