"""tools/test_gpu.py (`make test-gpu`) on a CPU: it stops at once without CUDA; its report never calls a part
that did not run on the GPU "passed", and a false claim fails its lesson; it adds its packages beside an existing
PyTorch, offline from a wheelhouse; grading passes the GPU into its sandbox and never zeroes a right answer for a
warning. The GPU path itself runs on a GPU runner."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
from coursetools import gpurun as runner  # noqa: E402

no_driver = pytest.mark.skipif(runner.nvml_gpus()[0] is not None, reason="this machine has an NVIDIA driver")


def _run(command, **env):
    start = time.monotonic()
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=60,
                          env={**os.environ, **env})
    return done, time.monotonic() - start


def test_stops_at_once_when_cuda_visible_devices_hides_every_gpu(tmp_path):
    done, seconds = _run([sys.executable, "-m", "coursetools.gpurun", "--artifacts", str(tmp_path)], CUDA_VISIBLE_DEVICES="")
    assert done.returncode == 2, done.stdout + done.stderr
    assert seconds < 10, "the check comes before any work"
    assert "cannot run the GPU path" in done.stderr and "hides every GPU" in done.stderr
    assert "unset CUDA_VISIBLE_DEVICES" in done.stderr and "make test" in done.stderr
    assert not any(tmp_path.iterdir()), "nothing ran, so nothing is reported"


@no_driver
def test_stops_at_once_without_an_nvidia_driver(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "CUDA_VISIBLE_DEVICES"}
    start = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "coursetools.gpurun", "--artifacts", str(tmp_path)], cwd=ROOT,
                          capture_output=True, text=True, timeout=60, env=env)
    assert done.returncode == 2 and time.monotonic() - start < 10
    assert "no NVIDIA driver" in done.stderr and "nvidia-smi" in done.stderr and "`make test`" in done.stderr
    assert "Traceback" not in done.stderr


@pytest.mark.skipif(shutil.which("make") is None, reason="needs make")
def test_make_test_gpu_checks_before_any_set_up():
    done, seconds = _run(["make", "--no-print-directory", "test-gpu", f"PYTHON={sys.executable}"],
                         CUDA_VISIBLE_DEVICES="-1")
    assert done.returncode != 0 and seconds < 10
    assert "hides every GPU" in done.stderr and "pip install" not in done.stdout


def test_the_quick_check():
    no_lib = lambda: (None, "libnvidia-ml.so.1: cannot open shared object file")  # noqa: E731
    why, fix = runner.quick_problem({}, nvml=no_lib)
    assert "no NVIDIA driver" in why and "libnvidia-ml" in why and "nvidia-smi" in fix
    assert "lists no GPU" in runner.quick_problem({}, nvml=lambda: (0, ""))[0]
    assert runner.quick_problem({"CUDA_VISIBLE_DEVICES": "0"}, nvml=lambda: (1, "")) is None
    assert "hides every GPU" in runner.quick_problem({"CUDA_VISIBLE_DEVICES": "-1"}, nvml=lambda: (8, ""))[0]


def _doctor(**torch_facts):
    return {"facts": {"torch": {"installed": True, "version": "2.14.1", "error": None, **torch_facts}}, "findings": []}


def test_the_pytorch_check_explains_each_usual_failure():
    assert runner.cuda_problem(_doctor(cuda="13.0", cuda_available=True)) is None
    assert "not installed" in runner.cuda_problem({"facts": {"torch": {"installed": False}}})[0]
    assert "CPU-only build" in runner.cuda_problem(_doctor(cuda=None, cuda_available=False))[0]
    old_driver = _doctor(cuda="13.0", cuda_available=False)
    old_driver["findings"] = [{"level": "info", "problem": "TensorFlow is not installed", "fix": ""},
                              {"level": "error", "problem": "The NVIDIA driver 535 supports CUDA up to 12.2",
                               "fix": "Update the NVIDIA driver"}]
    assert runner.cuda_problem(old_driver) == ("The NVIDIA driver 535 supports CUDA up to 12.2",
                                               "Update the NVIDIA driver")
    message = runner.stop_message(("why", "fix"))
    assert "why: why." in message and "what to do: fix." in message


def test_notebook_uses(tmp_path):
    def notebook(*sources):
        path = tmp_path / f"nb{len(sources)}.ipynb"
        cells = [{"cell_type": "code", "source": s} for s in sources] + [
            {"cell_type": "markdown", "source": "we do not `import_dali()` here"}]
        path.write_text(json.dumps({"cells": cells}))
        return path

    assert runner.notebook_uses(notebook("tf = gpucourse.import_tensorflow()\n")) == ["tensorflow"]
    assert runner.notebook_uses(notebook(["import torch\n", "x = 1"], "dali = gpucourse.import_dali()")) == ["dali"]
    assert runner.notebook_uses(notebook("import torch")) == []
    lesson = sorted((ROOT / "solutions").glob("*/*.ipynb"))[0]
    assert "tensorflow" in runner.notebook_uses(lesson), "lesson 01 shows TensorFlow's device list"


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
</testsuite></testsuites>"""


def test_parse_junit(tmp_path):
    path = tmp_path / "run.xml"
    path.write_text(JUNIT)
    cases = runner.parse_junit(path)
    assert [c["outcome"] for c in cases] == ["passed", "failed", "skipped", "error", "failed"]
    assert cases[1]["name"] == "Cell 1", "nbval's message: the exception, without colour codes or the cell's input"
    assert cases[1]["message"] == "RuntimeError: GPUCOURSE_REQUIRE_GPU=1 forbids the CPU fallback"
    assert cases[2]["message"] == "needs CUDA" and cases[3]["message"] == "kernel died"
    assert cases[4]["message"] == "AssertionError: pinned 9 GB/s"
    assert cases[2]["id"] == "tests.test_gpu::test_pinned" and cases[3]["id"] == "Cell 3"
    assert cases[0]["seconds"] == 2.5
    assert runner.parse_junit(tmp_path / "missing.xml") == []


FACTS = {
    "python": "3.11.9", "platform": "Linux", "gpucourse": "0.1.0", "cuda_visible_devices": None,
    "driver": {"found": True, "version": "570.86", "cuda": "12.8",
               "gpus": [{"index": 0, "name": "NVIDIA H100 80GB HBM3", "memory_gib": 79.1,
                         "compute_capability": "9.0"}]},
    "torch": {"installed": True, "version": "2.14.1", "cuda": "12.8", "cudnn": 91000, "cuda_available": True,
              "devices": ["NVIDIA H100 80GB HBM3"], "error": None},
    "tensorflow": {"installed": False, "version": None, "error": None},
    "dali": {"installed": False, "version": None, "error": None},
}


def _cells(*outcomes):
    return [{"id": f"Cell {i}", "name": f"Cell {i}", "outcome": o, "seconds": 1.0, "message": "boom" * (o != "passed")}
            for i, o in enumerate(outcomes)]


def _notebook(lesson, outcomes=("passed", "passed"), uses=("tensorflow",), returncode=0, **extra):
    return {"notebook": f"solutions/{lesson}/{lesson[3:]}.ipynb", "uses": list(uses), "returncode": returncode,
            "timed_out": False, "seconds": 42.0, "cases": _cells(*outcomes), "log": f"logs/{lesson}.log", **extra}


GPU_TESTS = {"returncode": 0, "timed_out": False, "seconds": 12.0, "cases": [
    {"id": "tests.test_gpu::test_a", "name": "test_a", "outcome": "passed", "seconds": 1.0, "message": ""}]}
BENCH = {"name": "NVIDIA H100 80GB HBM3", "known_as": "H100 SXM", "rows": [
    {"key": "bf16", "what": "matmul bf16", "value": 800.0, "unit": "TFLOP/s", "peak": 989.5, "ratio": 0.81,
     "note": ""}]}


def test_report_a_missing_framework_is_not_validated_never_passed():
    notebooks = [_notebook("01_verify_gpu"), _notebook("02_tensors_on_device", uses=())]
    report = runner.build_report(FACTS, notebooks, GPU_TESTS, BENCH, {"commit": "abc1234"})
    assert report["status"] == "partial" and report["problems"] == []
    rows = {row["notebook"]: row for row in report["notebooks"]}
    first = rows["solutions/01_verify_gpu/verify_gpu.ipynb"]
    assert first["result"] == "not validated" and first["not_validated_on_gpu"] == ["TensorFlow (not installed)"]
    assert rows["solutions/02_tensors_on_device/tensors_on_device.ipynb"]["result"] == "passed"
    assert report["not_validated_on_gpu"] == [{"what": "TensorFlow", "why": "not installed",
                                               "where": ["solutions/01_verify_gpu/verify_gpu.ipynb"]}]
    assert all(item["what"] != "DALI" for item in report["not_validated_on_gpu"]), "no lesson uses DALI here"
    env = report["environment"]
    assert env["device"] == "NVIDIA H100 80GB HBM3" and env["compute_capability"] == "9.0"
    assert env["driver"] == "570.86" and env["torch"] == "2.14.1" and env["commit"] == "abc1234"
    json.dumps(report)

    markdown = runner.render_markdown(report)
    assert "NOT VALIDATED ON GPU" in markdown and "- TensorFlow: not installed" in markdown
    assert "| solutions/01_verify_gpu/verify_gpu.ipynb | not validated | 42.0 s | - | TensorFlow (not installed) |" in markdown
    assert "NVIDIA H100 80GB HBM3" in markdown and "570.86" in markdown and "81%" in markdown
    assert "# GPU test report: PASSED: every" not in markdown


def test_report_everything_validated_is_passed():
    facts = {**FACTS, "tensorflow": {"installed": True, "version": "2.21.0", "gpus": 1, "error": None}}
    report = runner.build_report(facts, [_notebook("01_verify_gpu")], GPU_TESTS, BENCH)
    assert report["status"] == "passed" and report["notebooks"][0]["result"] == "passed"
    assert "nothing: every part ran on the GPU" in runner.render_markdown(report)


@pytest.mark.parametrize("installed_set", ["cpu", None, "gpu"])
def test_report_tensorflow_without_gpu_support(installed_set):
    """Its cells skip themselves under GPUCOURSE_REQUIRE_GPU=1: not validated on GPU, except in the GPU set (a failure)."""
    facts = {**FACTS, "course_set": installed_set,
             "tensorflow": {"installed": True, "version": "2.21.0", "is_cuda_build": True, "gpus": 0, "error": None}}
    report = runner.build_report(facts, [_notebook("05_dali_pipelines")], GPU_TESTS, BENCH)
    assert report["not_validated_on_gpu"][0]["why"].startswith("installed without GPU support: no CUDA libraries")
    assert report["notebooks"][0]["result"] == "not validated", "never failed for a framework without GPU support"
    if installed_set == "gpu":
        assert report["status"] == "failed" and "TensorFlow sees no GPU" in report["problems"][0]
    else:
        assert report["status"] == "partial" and report["problems"] == []


def test_report_a_failing_tensorflow_cell_still_fails():
    facts = {**FACTS, "tensorflow": {"installed": True, "version": "2.21.0", "gpus": 0, "error": None}}
    report = runner.build_report(facts, [_notebook("01_verify_gpu", outcomes=("passed", "failed"), returncode=1)],
                                 GPU_TESTS, BENCH)
    assert report["status"] == "failed"
    assert report["notebooks"][0]["result"] == "failed" and report["notebooks"][0]["failed_cells"] == ["Cell 1: boom"]
    assert "## Problems" in runner.render_markdown(report)


def test_report_failures_timeouts_and_skips():
    notebooks = [_notebook("01_verify_gpu", uses=(), timed_out=True, returncode=None),
                 _notebook("02_tensors_on_device", outcomes=(), uses=(), returncode=5)]
    skipped = {**GPU_TESTS, "cases": GPU_TESTS["cases"] + [
        {"id": "tests.test_gpu::test_b", "name": "test_b", "outcome": "skipped", "seconds": 0, "message": "no CUDA"}]}
    report = runner.build_report(FACTS, notebooks, skipped, {"error": "CUDA error: out of memory"})
    assert [row["result"] for row in report["notebooks"]] == ["timeout", "failed"], "no cells ran is no pass"
    assert report["status"] == "failed"
    assert any(p.startswith("bench:") for p in report["problems"])
    assert report["gpu_tests"]["skipped"] == ["tests.test_gpu::test_b: no CUDA"]
    assert {"what": "gpu test: tests.test_gpu::test_b", "why": "skipped: no CUDA", "where": []} in (
        report["not_validated_on_gpu"])
    none_ran = runner.build_report(FACTS, [], {**GPU_TESTS, "returncode": 5, "cases": []}, None)
    assert none_ran["gpu_tests"]["result"] == "failed" and none_ran["status"] == "failed"


def _lesson_notebook(folder: Path, code: str) -> Path:
    path = folder / f"{folder.name[3:]}.ipynb"
    folder.mkdir(parents=True)
    path.write_text(json.dumps({"cells": [{"cell_type": "code", "source": code}]}))
    return path


def test_a_false_claim_on_a_faked_cuda_run_fails_its_lesson_and_an_unmet_precondition_is_not_validated(tmp_path):
    """Each lesson runs as the runner runs it (its own GPUCOURSE_CLAIMS file, strict mode), with the cell's code in a
    child Python in place of nbval; gpucourse.claims sees a CUDA device string, so it checks and records."""
    def fake_nbval(args, junit, log, timeout, **env):
        code = json.loads(Path(args[0]).read_text())["cells"][0]["source"]
        done = subprocess.run([sys.executable, "-c", code], env=runner.subprocess_env(**env), capture_output=True,
                              text=True, timeout=60)
        outcome = "passed" if done.returncode == 0 else "failed"
        return {"returncode": done.returncode, "timed_out": False, "seconds": 3.0, "log": str(log),
                "cases": [{"id": "Cell 0", "name": "Cell 0", "outcome": outcome, "seconds": 1.0,
                           "message": runner.summarize(done.stderr) if outcome == "failed" else ""}]}

    setup = "from gpucourse import claims\ndevice = 'cuda:0'\n"
    ddp = _lesson_notebook(tmp_path / "06_data_parallel", setup + (
        "claims.needs('two GPUs for NCCL and DDP', 1 >= 2, device=device, why='1 GPU visible')\n"
        "claims.claim('DDP keeps the replicas equal', 0.0, device=device, at_most=1e-6)\n"))
    oom = _lesson_notebook(tmp_path / "07_troubleshooting_oom", setup + (
        "claims.claim('accumulation peak over the full batch peak', 0.7, device=device, at_most=0.65,"
        " source='the lesson\\'s arithmetic')\n"))
    artifacts = tmp_path / "artifacts"
    (artifacts / "claims").mkdir(parents=True)
    (artifacts / "claims" / "07_troubleshooting_oom.jsonl").write_text('{"kind": "claim", "passed": true}\n')
    results = [runner.run_lesson(nb, artifacts, 60, run=fake_nbval) for nb in (ddp, oom)]
    assert [len(r["claims"]) for r in results] == [2, 1], "one fresh file per lesson: an earlier run's lines are gone"

    facts = {**FACTS, "torch": {**FACTS["torch"], "devices": ["NVIDIA H100 80GB HBM3"] * 2}, "c_compiler": "/usr/bin/gcc",
             "python_headers": True}
    report = runner.build_report(facts, results, GPU_TESTS, BENCH, {"commit": "abc1234"})
    json.dumps(report)
    first, second = report["notebooks"]
    assert first["result"] == "not validated" and first["failed_claims"] == []
    assert first["not_validated_on_gpu"] == ["two GPUs for NCCL and DDP (1 GPU visible)"]
    assert {"what": "two GPUs for NCCL and DDP", "why": "1 GPU visible", "where": [first["notebook"]]} in (
        report["not_validated_on_gpu"])
    assert second["result"] == "failed", "a false claim fails its lesson"
    assert second["failed_cells"] == ["Cell 0: RuntimeError: GPU claim failed with GPUCOURSE_REQUIRE_GPU=1: "
                                      "accumulation peak over the full batch peak: 0.7, expected at most 0.65."]
    assert second["claims"] == [{"claim": "accumulation peak over the full batch peak", "measured": 0.7, "unit": "",
                                 "bound": "at most 0.65", "passed": False, "device": "cuda:0",
                                 "source": "the lesson's arithmetic"}]
    assert report["status"] == "failed"
    assert report["problems"][0] == (f"{second['notebook']}: failed (claim false: accumulation peak over the full "
                                     "batch peak: 0.7, expected at most 0.65)")

    markdown = runner.render_markdown(report)
    assert markdown.startswith("# GPU test report: FAILED")
    assert f"| {first['notebook']} | not validated | 3.0 s | 1/1 | two GPUs for NCCL and DDP (1 GPU visible) |" in markdown
    assert f"| {second['notebook']} | failed | 3.0 s | 0/1 | - |" in markdown
    assert (f"| {second['notebook']} | accumulation peak over the full batch peak | 0.7 | at most 0.65 | FAIL | "
            "the lesson's arithmetic |") in markdown
    assert f"- two GPUs for NCCL and DDP: 1 GPU visible ({first['notebook']})" in markdown

    # The same claim, caught in the lesson (or a run without strict mode): the cell passes, the lesson still fails.
    results[1]["cases"][0]["outcome"], results[1]["returncode"] = "passed", 0
    again = runner.build_report(facts, results, GPU_TESTS, BENCH)
    assert again["notebooks"][1]["result"] == "failed" and again["status"] == "failed"


def test_a_lesson_whose_gpu_path_this_machine_cannot_run_is_not_validated_even_without_its_own_needs():
    """The runner's own checks: DALI's TensorFlow plugin, two GPUs, a C compiler, and claims that never ran."""
    lessons = [_notebook("05_dali_pipelines", uses=("tensorflow", "dali", "dali-tf")),
               _notebook("06_data_parallel", uses=("two-gpus",)), _notebook("08_profile_and_compile", uses=("compiler",)),
               _notebook("07_troubleshooting_oom", uses=("claims",))]
    rich = {**FACTS, "tensorflow": {"installed": True, "version": "2.21.0", "gpus": 2, "error": None},
            "dali": {"installed": True, "version": "2.4.0", "error": None}, "dali_tf_plugin": True,
            "torch": {**FACTS["torch"], "devices": ["NVIDIA H100 80GB HBM3"] * 2}, "c_compiler": "/usr/bin/gcc",
            "python_headers": True}
    claimed = [{**lesson, "claims": [{"kind": "claim", "claim": "c", "measured": 1.0, "bound": "at least 0.5",
                                      "passed": True}]} for lesson in lessons]
    assert runner.build_report(rich, claimed, GPU_TESTS, BENCH)["status"] == "passed"

    poor = {**rich, "dali_tf_plugin": False, "torch": {**FACTS["torch"]}, "c_compiler": None}
    report = runner.build_report(poor, lessons, GPU_TESTS, BENCH)
    assert [row["result"] for row in report["notebooks"]] == ["not validated"] * 4 and report["status"] == "partial"
    why = {item["what"]: item["why"] for item in report["not_validated_on_gpu"]}
    assert why["DALI's TensorFlow plugin"].startswith("not installed: it compiles against TensorFlow")
    assert why["two GPUs"].startswith("1 GPU visible to PyTorch: NCCL, DDP")
    assert why["a C compiler"].startswith("no C compiler ($CC, gcc or clang): Inductor and Triton build")
    assert why["the lesson's GPU claims"] == "none ran on the GPU: no claim was recorded"
    assert "PASSED: every" not in runner.render_markdown(report)


def _wheel(folder: Path, name: str, version: str, *requires: str) -> Path:
    """A tiny pure-Python wheel: a package whose __init__ holds its version."""
    import zipfile

    info = f"{name}-{version}.dist-info"
    files = {f"{name}/__init__.py": f"__version__ = {version!r}\n",
             f"{info}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n"
                                 + "".join(f"Requires-Dist: {r}\n" for r in requires),
             f"{info}/WHEEL": "Wheel-Version: 1.0\nGenerator: tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n"}
    files[f"{info}/RECORD"] = "".join(f"{f},,\n" for f in [*files, f"{info}/RECORD"])
    path = folder / f"{name}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as archive:
        for file, text in files.items():
            archive.writestr(file, text)
    return path


@pytest.mark.slow
def test_setup_installs_offline_from_a_wheelhouse_beside_the_present_torch_and_never_replaces_it(tmp_path):
    """`make test-gpu ENV=system WHEELHOUSE=dir` on a machine with no index: the environment has a (fake) torch 2.99;
    the wheelhouse holds the suite (here two small packages), and a torch 3.0 pip would happily upgrade to."""
    offline = {k: v for k, v in os.environ.items() if not k.startswith("PIP_") and k.lower() not in {"http_proxy", "https_proxy"}}
    offline.update(PIP_CONFIG_FILE=os.devnull, PIP_INDEX_URL="http://127.0.0.1:9/simple", PIP_NO_INPUT="1",
                   PIP_DISABLE_PIP_VERSION_CHECK="1", http_proxy="http://127.0.0.1:9", https_proxy="http://127.0.0.1:9",
                   PYTHONPATH=str(ROOT / "tools"))  # as `make test-gpu` runs it: the runner from the checkout
    env = tmp_path / "env"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", "--system-site-packages", env], check=True)
    python = str(env / "bin" / "python")
    if subprocess.run([python, "-m", "pip", "--version"], capture_output=True).returncode != 0:
        shutil.rmtree(env)  # a base Python without pip: the environment gets its own
        subprocess.run([sys.executable, "-m", "venv", env], check=True)

    def run(*args):
        return subprocess.run([python, *args], capture_output=True, text=True, env=offline, cwd=ROOT, timeout=120)

    wheels, house = tmp_path / "wheels", tmp_path / "wheelhouse"
    wheels.mkdir(), house.mkdir()
    if run("-c", "import torch").returncode != 0:  # the base Python has no torch of its own
        done = run("-m", "coursetools.gpurun", "--setup", "--wheelhouse", house)
        assert done.returncode == 2 and "has no PyTorch" in done.stderr, "an environment without PyTorch: nothing to add to"
    import zipfile

    purelib = run("-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])").stdout.strip()
    zipfile.ZipFile(_wheel(wheels, "torch", "2.99.0")).extractall(purelib)  # installed as a wheel installs, by hand
    for wheel in (("torch", "3.0.0"), ("fakesuite", "1.0", "torch>=2", "fakedep"), ("fakedep", "1.0"),
                  ("fakenew", "1.0", "torch>=3")):
        _wheel(house, *wheel)
    torch_files = sorted(p for p in (env / "lib").rglob("torch*/*") if p.is_file())
    before = {p: p.read_bytes() for p in torch_files}
    suite, newer = tmp_path / "suite.txt", tmp_path / "newer.txt"
    suite.write_text("fakesuite==1.0\n"), newer.write_text("fakenew==1.0\n")

    done = run("-m", "coursetools.gpurun", "--setup", "--wheelhouse", house, "--requirements", suite)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "--no-index --find-links" in done.stdout and "--constraint" in done.stdout
    assert "added 2 package(s) (fakedep, fakesuite) beside PyTorch 2.99.0" in done.stdout
    shown = run("-c", "import torch, fakesuite, gpucourse; print(torch.__version__, gpucourse.__file__)").stdout.split()
    assert shown == ["2.99.0", str(ROOT / "utils" / "gpucourse" / "__init__.py")], "gpucourse comes from this checkout"
    assert {p: p.read_bytes() for p in torch_files} == before, "the present torch is untouched"

    done = run("-m", "coursetools.gpurun", "--setup", "--wheelhouse", house, "--requirements", newer)
    assert done.returncode == 1 and "PyTorch 2.99.0 is kept as it is (offline" in done.stderr, "needs torch 3: refused"
    assert run("-c", "import torch; print(torch.__version__)").stdout.strip() == "2.99.0"
    assert {p: p.read_bytes() for p in torch_files} == before

    done = run("-m", "coursetools.gpurun", "--setup", "--wheelhouse", house, "--requirements", suite)
    assert done.returncode == 0 and "$ " not in done.stdout and "none missing" in done.stdout, "nothing left to add"


def test_the_suite_beside_pytorch_and_its_wheelhouse_command():
    suite = runner.suite_requirements()
    assert "nbval==0.11.0" in suite and "ipykernel==7.4.0" in suite and "nbgrader==0.9.6" in suite
    assert not [r for r in suite if re.match(r"(torch|tensorflow|nvidia-dali|keras)", r)], "never a framework"
    present = {"torch": "2.8.0a0+5228986c39.nv25.06", "nvidia-cudnn-cu12": "9.10.2.21", "numpy": "1.26.4",
               "nbval": "0.10.0", "nvidia-ml-py": "12.575.51", "jupyterlab": "4.0.0"}
    commands, constraints = runner.setup_plan(present, suite, "/wh", python="/opt/py")
    assert constraints == "numpy==1.26.4\nnvidia-cudnn-cu12==9.10.2.21\ntorch==2.8.0a0+5228986c39.nv25.06\n"
    (command,) = commands
    assert command[:8] == ["/opt/py", "-m", "pip", "install", "--no-index", "--find-links", "/wh", "--constraint"]
    assert "nbval==0.11.0" not in command and "numpy==2.4.6" not in command, "present packages are left as they are"
    assert "ipykernel==7.4.0" in command and "nvidia-ml-py==13.615.71" not in command
    assert runner.setup_plan({**present, **{r.split("==")[0]: "1" for r in suite}}, suite)[0] == []

    download = runner.download_command("/wh", "3.12", "manylinux_2_28_x86_64")
    assert download[1:9] == ["-m", "pip", "download", "--only-binary=:all:", "--dest", "/wh", "--python-version", "3.12"]
    assert download[-len(suite):] == suite
    platforms = download[10:-len(suite):2]
    assert set(download[9:-len(suite):2]) == {"--platform"}, "pip widens manylinux2014 alone: each older one named"
    assert platforms[:2] == ["manylinux_2_28_x86_64", "manylinux_2_27_x86_64"] and "manylinux_2_17_x86_64" in platforms
    assert platforms[-3:] == ["manylinux2014_x86_64", "manylinux2010_x86_64", "manylinux1_x86_64"]
    assert runner.platforms("win_amd64") == ["win_amd64"]


@pytest.mark.skipif(shutil.which("make") is None, reason="needs make")
def test_make_test_gpu_in_an_existing_environment_and_make_wheelhouse():
    """What make would run (make -n): the named Python's environment, never .venv's set-up; a wheelhouse for it."""
    def dry(*args):
        env = {k: v for k, v in os.environ.items() if k not in {"ENV", "PYTHON", "WHEELHOUSE", "MAKEFLAGS"}}
        done = subprocess.run(["make", "-n", "--no-print-directory", *args], cwd=ROOT, capture_output=True, text=True,
                              env=env, timeout=60)
        return [line for line in done.stdout.splitlines() if not line.startswith("course environment:")]

    preflight, setup, run = dry("test-gpu", "ENV=system", "WHEELHOUSE=/w", "GPU_ARGS=02_tensors_on_device --require-all")
    python = preflight.split()[1]  # PYTHONPATH=tools python3 -m coursetools.gpurun ...
    assert "/.venv/" not in python and os.path.basename(python).startswith("python3"), "the system's python3, not .venv's"
    assert setup == f"PYTHONPATH=tools {python} -m coursetools.gpurun --setup --wheelhouse /w"
    assert run == f"PYTHONPATH=tools {python} -m coursetools.gpurun 02_tensors_on_device --require-all"
    assert dry("test-gpu", f"PYTHON={sys.executable}")[1:] == [f"PYTHONPATH=tools {sys.executable} -m coursetools.gpurun --setup ",
                                                              f"PYTHONPATH=tools {sys.executable} -m coursetools.gpurun "]
    assert "holds no PyTorch: add ENV=system" in dry("test-gpu", "WHEELHOUSE=/w")[1], "a wheelhouse alone builds no .venv"
    assert dry("wheelhouse", "WHEELHOUSE=/w", "PY=3.12", "PLATFORM=manylinux_2_28_x86_64")[1].endswith(
        "-m coursetools.gpurun --download /w --python-version 3.12 --platform manylinux_2_28_x86_64")


# ---- grading on a GPU: the sandbox passes the GPU through, and a warning never costs a right answer its points ----
def _grade_module():
    from coursetools import grade

    return grade


def test_the_sandbox_passes_the_gpus_and_their_driver_libraries_through(tmp_path):
    grade = _grade_module()
    dev = tmp_path / "dev"
    for name in ("nvidia0", "nvidia1", "nvidiactl", "nvidia-uvm", "nvidia-uvm-tools", "nvidia-modeset", "dxg", "null",
                 "nvme0n1", "fb0"):
        (dev / name).parent.mkdir(parents=True, exist_ok=True)
        (dev / name).touch()
    (dev / "nvidia-caps").mkdir()
    site, nix, cuda = (tmp_path / d for d in ("site/driver/lib", "run/opengl-driver/lib", "cluster/cuda/lib64"))
    for folder in (site, nix, cuda):
        folder.mkdir(parents=True)
    (tmp_path / "store").mkdir()
    (tmp_path / "store" / "libcuda.so.550.54").touch()
    (nix / "libcuda.so.1").symlink_to(tmp_path / "store" / "libcuda.so.550.54")  # NixOS: a link into the store
    ldconfig = (f"\tlibcuda.so.1 (libc6,x86-64) => /usr/lib/x86_64-linux-gnu/libcuda.so.1\n"
                f"\tlibcuda.so.1 (libc6,x86-64) => {nix}/libcuda.so.1\n"
                f"\tlibnvidia-ml.so.1 (libc6,x86-64) => {site}/libnvidia-ml.so.1\n"
                f"\tlibcudart.so.12 (libc6,x86-64) => /elsewhere/libcudart.so.12\n")
    devices, libraries = grade.gpu_passthrough(str(dev), ldconfig, {"LD_LIBRARY_PATH": f"{cuda}:/usr/local/cuda/lib64:"})
    assert devices == [str(dev / n) for n in ("dxg", "nvidia-caps", "nvidia-modeset", "nvidia-uvm", "nvidia-uvm-tools",
                                              "nvidia0", "nvidia1", "nvidiactl")]
    assert libraries == sorted(map(str, (cuda, nix, site, tmp_path / "store"))), "/usr is in the sandbox already"
    assert grade.gpu_passthrough(str(tmp_path / "no-gpu"), ldconfig, {}) == ([], []), "no GPU, nothing to pass"

    command = grade.sandbox_command(["/env/bin/python", "-m", "ipykernel_launcher"], workdir="/course/autograded/a",
                                    runtime="/tmp/grade-x", memory=0, cpu_seconds=60, python_dirs=["/env"],
                                    devices=devices, libraries=libraries, environ={"LD_LIBRARY_PATH": str(cuda)})
    binds = [tuple(command[i:i + 3]) for i, part in enumerate(command) if part in {"--dev-bind", "--ro-bind"}]
    assert [(kind, path) for kind, path, same in binds if path == same and (path in devices or path in libraries)] == (
        [("--ro-bind", d) for d in libraries] + [("--dev-bind", d) for d in devices])
    assert ("--setenv", "LD_LIBRARY_PATH", str(cuda)) in zip(command, command[1:], command[2:], strict=False)
    assert not any(part.startswith("--as=") for part in command), "no address-space limit with a GPU (CUDA reserves more)"
    with pytest.raises(RuntimeError, match="holds the course"):
        grade.sandbox_command(["python"], workdir="/w", runtime="/r", memory=0, cpu_seconds=1, python_dirs=[],
                              devices=devices, libraries=["/home/me"], environ={}, course="/home/me/course")


def test_a_graded_cell_fails_by_raising_never_by_its_stderr():
    from nbformat.v4 import new_code_cell, new_output
    from nbgrader.utils import has_failed

    grade = _grade_module()

    def cell(*outputs, graded=True):
        made = new_code_cell("assert double(2) == 4", outputs=list(outputs))
        made.metadata.nbgrader = {"grade": graded, "solution": False, "grade_id": "test_double", "points": 1}
        return made

    warning = new_output("stream", name="stderr", text="falling back to the slow kernel\n")
    right = cell(new_output("stream", name="stdout", text="checked\n"), warning)
    assert has_failed(right), "nbgrader alone zeroes it"
    assert not has_failed(grade.stderr_kept_visible(right)) and right.outputs[1].text == "falling back to the slow kernel\n"
    wrong = cell(new_output("stream", name="stderr", text="warn\n"), new_output("error", ename="AssertionError",
                                                                                  evalue="", traceback=[]))
    assert has_failed(grade.stderr_kept_visible(wrong)) and wrong.outputs[0].name == "stderr"
    ungraded = cell(new_output("stream", name="stderr", text="a log line\n"), graded=False)
    assert grade.stderr_kept_visible(ungraded).outputs[0].name == "stderr", "only graded cells are changed"


@pytest.mark.slow
def test_a_right_answer_that_warns_keeps_its_points_and_its_warning_shows(tmp_path):
    """Real autograde (the course's nbgrader_config.py, sandboxed where bubblewrap can be) of a small assignment."""
    import coursekit as ck
    from test_sandbox import ASSIGNMENT, NAME, _course

    course = _course(tmp_path)
    student = ck.read(course / "release" / ASSIGNMENT / NAME)
    warns = ("import logging, warnings\n\ndef double(x):\n"
             "    logging.getLogger('a.library').warning('falling back to the slow kernel')  # as a library logs\n"
             "    warnings.warn('this call is deprecated in a library', UserWarning)\n    return {}\n")
    rest = {"square": "def square(x):\n    return x * x", "negate": "def negate(x):\n    return -x"}
    ck.submit_as(course, "warns", ASSIGNMENT, NAME, ck.submission_from(student, {"double": warns.format("2 * x"), **rest}))
    ck.submit_as(course, "wrong", ASSIGNMENT, NAME, ck.submission_from(student, {"double": warns.format("3 * x"), **rest}))
    result = ck.nbgrader(course, "autograde", ASSIGNMENT, "--force", check=False)
    assert result.returncode == 0, result.stdout + result.stderr
    score = {s: {g: v for g, (v, _, _) in ck.scores_of(course, ASSIGNMENT, NAME, s).items()} for s in ("warns", "wrong")}
    assert score["warns"] == {"test_double": 1, "test_square": 1, "test_negate": 1}, "the warning costs nothing"
    assert score["wrong"] == {"test_double": 0, "test_square": 1, "test_negate": 1}, "a wrong answer still fails"
    graded = ck.read(course / "autograded" / "warns" / ASSIGNMENT / NAME)
    (test,) = [c for c in graded.cells if c.metadata.get("nbgrader", {}).get("grade_id") == "test_double"]
    shown = "".join(o.get("text", "") for o in test.outputs if o.get("name") == "stdout")
    assert "falling back to the slow kernel" in shown and "UserWarning: this call is deprecated" in shown, test.outputs
    validated = ck.nbgrader(course, "validate", str(course / "submitted" / "warns" / ASSIGNMENT / NAME), check=False)
    assert "Success! Your notebook passes all the tests." in validated.stdout, "the Validate button agrees with autograde"
    validated = ck.nbgrader(course, "validate", str(course / "submitted" / "wrong" / ASSIGNMENT / NAME), check=False)
    assert "VALIDATION FAILED ON 1 CELL(S)!" in validated.stdout, "and still fails a wrong answer"


def test_main_wires_lessons_claims_gpu_tests_grading_and_the_report_together(tmp_path, monkeypatch):
    """main() with every run faked: what it asks pytest for, and the report files it writes."""
    calls = []

    def fake_pytest(args, junit, log, timeout, **env):
        calls.append((args, env))
        if "GPUCOURSE_CLAIMS" in env and "07_" in args[0]:
            Path(env["GPUCOURSE_CLAIMS"]).write_text(json.dumps(
                {"kind": "claim", "claim": "checkpointing at most 80% of the peak", "measured": 0.9, "unit": "",
                 "bound": "at most 0.8", "passed": False, "device": "cuda:0", "source": "the lesson's arithmetic"}) + "\n")
        return {"returncode": 0, "timed_out": False, "seconds": 1.0, "log": str(log),
                "cases": [{"id": "t", "name": "t", "outcome": "passed", "seconds": 1.0, "message": ""}]}

    monkeypatch.setattr(runner, "quick_problem", lambda: None)
    monkeypatch.setattr(runner, "doctor_report", lambda: {"facts": FACTS})
    monkeypatch.setattr(runner, "run_pytest", fake_pytest)
    monkeypatch.setattr(runner, "run_bench", lambda artifacts: BENCH)
    assert runner.main(["--artifacts", str(tmp_path)]) == 1, "lesson 07's claim is false"
    lessons = [args for args, env in calls if "GPUCOURSE_CLAIMS" in env]
    assert len(lessons) == len(list((ROOT / "solutions").glob("*/*.ipynb")))
    assert [args for args, env in calls if "GPUCOURSE_CLAIMS" not in env] == [
        ["tests", "-m", "gpu", "-k", "not autograde"], ["tests/test_gpu.py", "-m", "gpu", "-k", "autograde"]]
    report = json.loads((tmp_path / "gpu-report.json").read_text())
    assert report["status"] == "failed" and report["grading"]["result"] == "passed"
    assert report["environment"]["executable"] == sys.executable
    markdown = (tmp_path / "gpu-report.md").read_text()
    assert "| checkpointing at most 80% of the peak | 0.9 | at most 0.8 | FAIL | the lesson's arithmetic |" in markdown
    assert "## Grading on the GPU (nbgrader autograde in the sandbox, expected scores): passed" in markdown

    calls.clear()
    runner.main(["02_tensors_on_device", "--artifacts", str(tmp_path)])
    assert calls[-1][0][-1] == "autograde and (sandbox or 02_tensors_on_device)"
