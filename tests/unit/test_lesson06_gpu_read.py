"""Lesson 06 on the GPUs it has not run on yet, pinned on a CPU.

- DataParallel's check: DataParallel splits a batch with ``torch.chunk`` (``scatter_gather.scatter``
  passes no chunk sizes to ``comm.scatter``, whose C++ side, ``torch/csrc/cuda/comm.cpp``, then
  calls ``tensor.chunk(devices.size())``) and replicates onto ``device_ids[:len(inputs)]``: 16 rows
  on 5 GPUs are 4 slices on 4 GPUs. The check expects one call per slice, runs from two GPUs on,
  and fails when one thread does all the work (GPU counts monkeypatched, calls modelled so).
- TF32: ``TORCH_ALLOW_TF32_CUBLAS_OVERRIDE=1`` (NVIDIA's PyTorch containers) is read when torch is
  imported, as the default of ``float32_matmul_precision``; ``gpucourse.launch`` starts its
  workers with it at 0; the lesson's single-process reference runs on the CPU, which it does not
  touch; and TF32's rounding, emulated, moves Exercise 3's job far beyond the 1e-5 it is checked
  with.
- Exercise 3's grade: the test runs the script on gloo ranks whatever the GPU count, and a script
  that leaves its labels (or everything) on the CPU loses the points on every grader (a fake
  ``torchrun`` that runs the test's own watcher over stand-in scripts).
"""

from __future__ import annotations

import ast
import builtins
import inspect
import json
import os
import shutil
import subprocess
import sys
import types
from pathlib import Path

import coursekit as ck
import pytest
import torch
import torch.nn.functional as F
from torch.utils.data import DistributedSampler

import gpucourse
from gpucourse import launch

DDP = "06_data_parallel"
CHECK = "# @title GPU check: DataParallel calls"
SLICE_CLAIM = "one DataParallel call per slice"
MAKE_MODEL = "The lesson's model: 16 x 16 RGB shapes in"


# DataParallel's check -----------------------------------------------------------------------------


def test_dataparallel_splits_with_chunk_and_uses_only_the_gpus_that_got_a_slice():
    """The installed torch: scatter asks for no chunk sizes, forward replicates onto the devices
    that got a slice; torch.chunk then gives fewer slices than GPUs for 5, 7, 9 to 15 GPUs."""
    from torch.nn.parallel import scatter_gather

    assert "Scatter.apply(target_gpus, None, dim, obj)" in inspect.getsource(scatter_gather.scatter)
    forward = inspect.getsource(torch.nn.DataParallel.forward)
    assert "self.device_ids[: len(inputs)]" in forward
    assert "if len(self.device_ids) == 1:" in forward  # one GPU: the module is called as it is
    slices = {gpus: len(torch.zeros(16).chunk(gpus)) for gpus in range(2, 17)}
    fewer = sorted(gpus for gpus, n in slices.items() if n < gpus)
    assert fewer == [5, 7, 9, 10, 11, 12, 13, 14, 15], slices


def dataparallel_calls(rows: int, gpus: int, *, one_thread: bool = False) -> list[tuple]:
    """What the lesson's hook records for one DataParallel call on ``gpus`` GPUs (``one_thread``:
    the broken path, one thread running every slice on GPU 0)."""
    if gpus == 0:
        return [("cpu", rows, "MainThread")]
    if gpus == 1:  # forward calls the module itself, in the caller's thread
        return [("cuda:0", rows, "MainThread")]
    pieces = torch.zeros(rows).chunk(gpus)
    if one_thread:
        return [("cuda:0", len(p), "MainThread") for p in pieces]
    return [(f"cuda:{i}", len(p), f"Thread-{i + 1} (_worker)") for i, p in enumerate(pieces)]


def _slice_check(gpus: int, calls: list[tuple], monkeypatch, tmp_path) -> dict:
    """Cells 11 and 13 with ``gpus`` GPUs: the record the check appends."""
    record = tmp_path / "claims.jsonl"
    monkeypatch.setenv("GPUCOURSE_CLAIMS", str(record))
    monkeypatch.setattr(torch.cuda, "device_count", lambda: gpus)
    nb = {"torch": torch, "gpucourse": gpucourse}
    exec(ck.code_cell(DDP, "def record_call("), nb)
    assert nb["gpus"] == gpus
    nb |= {"calls": calls, "batch": torch.zeros(16, 3, 16, 16)}
    nb["device"] = torch.device("cuda" if gpus else "cpu")
    exec(ck.code_cell(DDP, CHECK), nb)
    (line,) = record.read_text().splitlines()
    entry = json.loads(line)
    assert entry["claim"].startswith(SLICE_CLAIM), entry
    return entry


@pytest.mark.parametrize("gpus", [0, 1])
def test_the_dataparallel_check_does_not_run_without_two_gpus(gpus, monkeypatch, tmp_path):
    """One GPU (the H200 of the course's run, a T4) or none: nothing was split, so the check did
    not run; it used to pass at 1 == 1 == 1."""
    entry = _slice_check(gpus, dataparallel_calls(16, gpus), monkeypatch, tmp_path)
    assert (entry["measured"], entry["passed"]) == (None, None), entry


@pytest.mark.parametrize("gpus", [2, 3, 4, 5, 7, 8, 12, 16])
def test_the_dataparallel_check_passes_on_any_count_of_gpus_and_fails_one_thread(
    gpus, monkeypatch, tmp_path
):
    """A slice per call, each on its own GPU and thread: passes on 5 and 7 GPUs too (4 and 6
    slices), where comparing with the GPU count failed; one thread doing all the work fails."""
    right = _slice_check(gpus, dataparallel_calls(16, gpus), monkeypatch, tmp_path)
    assert (right["measured"], right["passed"]) == (1.0, True), right
    (tmp_path / "claims.jsonl").unlink()
    broken = dataparallel_calls(16, gpus, one_thread=True)
    wrong = _slice_check(gpus, broken, monkeypatch, tmp_path)
    assert (wrong["measured"], wrong["passed"]) == (0.0, False), wrong


# TF32 --------------------------------------------------------------------------------------------

PRECISION = "import torch; print(torch.get_float32_matmul_precision())"


def test_the_launcher_clears_the_containers_tf32_override_and_keeps_the_rest(monkeypatch):
    monkeypatch.setenv("TORCH_ALLOW_TF32_CUBLAS_OVERRIDE", "1")
    monkeypatch.setenv("GPUCOURSE_TEST_KEPT", "yes")
    env = launch._environment(2)
    assert env["TORCH_ALLOW_TF32_CUBLAS_OVERRIDE"] == "0"
    assert env["GPUCOURSE_TEST_KEPT"] == "yes" and env["PYTHONUNBUFFERED"] == "1"


def test_ranks_launched_from_an_nvidia_container_compute_matmuls_in_float32(tmp_path, monkeypatch):
    """The variable as NVIDIA's containers set it: a worker the helper starts reads "highest" (no
    TF32), where a process started with it reads "high" (the reference's test below)."""
    monkeypatch.setenv("TORCH_ALLOW_TF32_CUBLAS_OVERRIDE", "1")
    script = tmp_path / "precision.py"
    script.write_text(PRECISION + "\n")
    run = launch.torchrun(script, nproc_per_node=1, timeout=120, stream=False)
    assert run.output(0) == ["highest"], run.output(0)


def _reference_namespace() -> dict:
    nb = {"gpucourse": gpucourse, "torch": torch, "F": F, "DistributedSampler": DistributedSampler}
    exec(ck.code_cell(DDP, MAKE_MODEL), nb)
    exec(ck.code_cell(DDP, "def reference_training("), nb)
    return nb


JOB = dict(samples=48, global_batch_size=8, epochs=2, lr=0.1, seed=3, world_size=2)


def test_the_single_process_reference_is_the_same_under_the_override(tmp_path):
    """The notebook's reference runs on the CPU: the override (read, "high") changes none of its
    bits, so a kernel in NVIDIA's container needs nothing cleared."""
    sources = [ck.code_cell(DDP, MAKE_MODEL), ck.code_cell(DDP, "def reference_training(")]
    program = "\n".join(
        [
            "import sys, torch, torch.nn.functional as F, gpucourse",
            "from torch.utils.data import DistributedSampler",
            *sources,
            f"torch.save(reference_training(**{JOB!r}), sys.argv[1])",
            "print(torch.get_float32_matmul_precision())",
        ]
    )
    env = {**os.environ, "TORCH_ALLOW_TF32_CUBLAS_OVERRIDE": "1", "OMP_NUM_THREADS": "1"}
    out = tmp_path / "reference.pt"
    run = subprocess.run(
        [sys.executable, "-c", program, str(out)], capture_output=True, text=True, env=env
    )
    assert run.stdout.split() == ["high"], run.stdout + run.stderr
    here = _reference_namespace()["reference_training"](**JOB)
    there = torch.load(out)
    assert all(torch.equal(here[k], there[k]) for k in here)


def _tf32(t: torch.Tensor) -> torch.Tensor:
    """float32 rounded to TF32's 10-bit mantissa (to nearest, ties to even), as tensor cores read
    their inputs."""
    bits = t.contiguous().view(torch.int32)
    return ((bits + 0xFFF + ((bits >> 13) & 1)) & ~0x1FFF).view(torch.float32)


class _TF32Linear(torch.autograd.Function):
    """A Linear whose three matmuls (forward, both of backward) read TF32 inputs."""

    @staticmethod
    def forward(ctx, x, weight, bias):
        ctx.save_for_backward(x, weight)
        return _tf32(x) @ _tf32(weight).T + bias

    @staticmethod
    def backward(ctx, grad):
        x, weight = ctx.saved_tensors
        return _tf32(grad) @ _tf32(weight), _tf32(grad).T @ _tf32(x), grad.sum(0)


def test_tf32_rounding_moves_exercise_3s_job_about_2e_3(monkeypatch):
    """The lesson's "about 2e-3": the reference job with every matmul reading TF32 inputs, against
    float32; the check and the hidden test allow 1e-5."""
    assert float(_tf32(torch.tensor(1 + 2**-11))) == 1.0  # a tie rounds to even
    assert float(_tf32(torch.tensor(1 + 3 * 2**-11))) == 1 + 2**-9
    nb = _reference_namespace()
    fp32 = nb["reference_training"](**JOB)
    make_model = nb["make_model"]

    def tf32_model(seed=0):
        model = make_model(seed)
        for layer in (model[1], model[3]):
            layer.forward = lambda x, layer=layer: _TF32Linear.apply(x, layer.weight, layer.bias)
        return model

    nb["make_model"] = tf32_model
    tf32 = nb["reference_training"](**JOB)
    gap = max(float((fp32[k] - tf32[k]).abs().max()) for k in fp32)
    assert 1e-3 < gap < 4e-3, gap
    assert "about 2e-3" in next(
        c.source for c in ck.read(ck.solution_path(DDP)).cells if "TORCH_ALLOW_TF32" in c.source
    )


# Exercise 3's grade ------------------------------------------------------------------------------

TEST_CELL = 'watcher = workdir / "watch_batches.py"'
STAND_INS = {  # what a training script does with its batches, as the watcher sees it
    "right": "images, labels = images.to(device), labels.to(device)",
    "labels left on the CPU": "images = images.to(device)",
    "nothing moved": "pass",
}
STAND_IN = """
import torch
device = torch.device("cpu")
images, labels = torch.zeros(2, 3, 16, 16), torch.zeros(2, dtype=torch.long)
for step in range(2):
    {}
"""
RUN_EACH = """
import runpy, sys, torch
to, cuda = torch.Tensor.to, torch.Tensor.cuda
watcher, *scripts = sys.argv[1:]
for script in scripts:
    torch.Tensor.to, torch.Tensor.cuda = to, cuda
    sys.argv = [watcher, script]
    runpy.run_path(watcher, run_name="__main__")
    print("--- end of", script)
"""


def _watcher_source() -> str:
    tree = ast.parse(ck.code_cell(DDP, TEST_CELL))
    (text,) = [
        node.args[0].value
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        and getattr(node.func, "attr", "") == "write_text"
        and isinstance(node.args[0], ast.Constant)
    ]
    return text


@pytest.fixture(scope="module")
def watched(tmp_path_factory) -> dict[str, list[str]]:
    """The test's own watcher over each stand-in script: its lines, by stand-in (one Python)."""
    folder = tmp_path_factory.mktemp("watched")
    (folder / "watch.py").write_text(_watcher_source())
    scripts = []
    for i, body in enumerate(STAND_INS.values()):
        scripts.append(folder / f"script{i}.py")
        scripts[-1].write_text(STAND_IN.format(body))
    env = {**os.environ, "OMP_NUM_THREADS": "1", "CUDA_VISIBLE_DEVICES": ""}
    run = subprocess.run(
        [sys.executable, "-c", RUN_EACH, str(folder / "watch.py"), *map(str, scripts)],
        capture_output=True,
        text=True,
        env=env,
    )
    assert run.returncode == 0, run.stderr
    pieces = run.stdout.split("--- end of")[:-1]
    assert len(pieces) == len(STAND_INS), run.stdout
    return {name: p.strip().splitlines()[-2:] for name, p in zip(STAND_INS, pieces, strict=True)}


class FakeLaunch(types.SimpleNamespace):
    """``gpucourse.launch`` whose torchrun records its command and answers with the ranks' lines
    of a stand-in script, each rank saving the same weights (as DDP leaves them)."""

    def __init__(self, lines: list[str]):
        super().__init__(LaunchError=launch.LaunchError, LaunchResult=launch.LaunchResult)
        self.lines, self.calls = lines, []

    def torchrun(self, script, *args, nproc_per_node=2, timeout=120, stream=True):
        args = [str(a) for a in args]
        self.calls.append((Path(script).name, args, nproc_per_node))
        out = Path(args[args.index("--out") + 1])
        out.mkdir(parents=True, exist_ok=True)
        weights = {"w": torch.ones(2)}
        for r in range(nproc_per_node):
            torch.save(weights, out / f"rank{r}.pt")
        torch.save({"model": weights}, out / "checkpoint.pt")
        result = launch.LaunchResult(" ".join(["torchrun", str(script), *args]))
        result.ranks = {r: ["epoch 0: loss 1.0", *self.lines] for r in range(nproc_per_node)}
        return result


def _namespace(gpus: int, workdir: Path, fake: FakeLaunch) -> dict:
    nb = {"torch": torch, "shutil": shutil, "workdir": workdir, "launch": fake, "gpus": gpus}
    setup = ck.code_cell(DDP, 'backend = "nccl" if gpus >= 2').splitlines()
    chosen = [line for line in setup if line.startswith(("backend =", "nproc =", "launch_device"))]
    assert len(chosen) == 3, setup
    exec("\n".join(chosen), nb)  # the lines that choose; not the real launcher's import
    exec(ck.code_cell(DDP, "def max_difference("), nb)
    exec(ck.code_cell(DDP, "def script_args("), nb)
    return nb


def _grade(gpus: int, lines: list[str], tmp_path: Path) -> tuple[str, list]:
    """Exercise 3's visible test (its hidden part needs the real run) with ``gpus`` GPUs: "passed"
    or the assertion's message, and the launches it made."""
    fake = FakeLaunch(lines)
    workdir = tmp_path / f"gpus{gpus}"
    workdir.mkdir()
    nb = _namespace(gpus, workdir, fake)
    visible = ck.code_cell(DDP, TEST_CELL).split("### BEGIN HIDDEN TESTS")[0]
    try:
        exec(visible, nb)
    except AssertionError as error:
        return str(error), fake.calls
    return "passed", fake.calls


@pytest.mark.parametrize("stand_in", STAND_INS)
def test_exercise_3_grades_the_same_on_a_cpu_one_gpu_and_eight(stand_in, watched, tmp_path):
    """The same script scores the same with 0, 1, 2 or 8 GPUs: the test always launches two gloo
    ranks; a script that leaves its labels on the CPU (4/4 on a CPU grader, 0/4 on two GPUs, where
    the loss crashed) or moves nothing loses its points everywhere, a right one keeps them."""
    grades = {gpus: _grade(gpus, watched[stand_in], tmp_path) for gpus in (0, 1, 2, 8)}
    verdicts = {gpus: verdict for gpus, (verdict, _) in grades.items()}
    assert len(set(verdicts.values())) == 1, verdicts
    for _, calls in grades.values():
        ((script, args, nproc),) = calls
        assert args[args.index("--backend") + 1] == "gloo" and nproc == 2, calls
    verdict = verdicts[0]
    if stand_in == "right":
        assert verdict == "passed", verdict
    elif stand_in == "labels left on the CPU":
        assert "label batches" in verdict and "crash the loss" in verdict, verdict
    else:
        assert "image batches" in verdict, verdict


def test_with_two_gpus_the_script_also_runs_over_nccl_outside_grading(watched, tmp_path):
    """The demo after the test: with two GPUs or more, the same script over NCCL, whose weights
    the checks and the proof then read; with fewer, no launch."""
    demo = ck.code_cell(DDP, 'run_dir = workdir / "exercise-nccl"')
    assert "demo" in next(
        c.metadata.get("tags", []) for c in ck.read(ck.solution_path(DDP)).cells if c.source == demo
    )
    for gpus, launches in ((1, 1), (2, 2)):
        fake = FakeLaunch(watched["right"])
        nb = _namespace(gpus, tmp_path / f"demo{gpus}", fake)
        (tmp_path / f"demo{gpus}").mkdir()
        visible = ck.code_cell(DDP, TEST_CELL).split("### BEGIN HIDDEN TESTS")[0]
        exec(visible, nb)
        exec(demo, nb)
        assert len(fake.calls) == launches, fake.calls
        if launches == 2:
            script, args, nproc = fake.calls[1]
            assert (script, args[args.index("--backend") + 1], nproc) == ("train_ddp.py", "nccl", 2)
            assert nb["run_dir"].name == "exercise-nccl" and len(nb["ranks"]) == 2


def test_the_lesson_sizes_the_cuda_context_as_measured():
    """A few hundred MiB a GPU, the H200's 0.7 GiB quoted; not the 100 MiB of older drivers."""
    source = ck.code_cell(DDP, "del dp_model, model, out, batch")
    assert "100 MiB" not in source and "0.7 GiB" in source


# Exercise 3's referee: nothing it judges with sits in an editable cell ---------------------------


def _bound(source: str) -> set[str]:
    """The names a cell binds at any level (assignments, definitions, imports, loop targets)."""
    names = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
        elif isinstance(node, ast.FunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Import | ast.ImportFrom):
            names |= {(a.asname or a.name).split(".")[0] for a in node.names}
        elif isinstance(node, ast.arg):
            names.add(node.arg)
    return names


def test_exercise_3s_test_reads_only_locked_cells():
    """Every name the test cell reads from the notebook is set by a read-only cell, which autograde
    restores: the rank count (once the editable set-up's nproc), the launcher, the folder, the
    command line (script_args) and the referees."""
    cells = ck.read(ck.solution_path(DDP)).cells
    test = ck.code_cell(DDP, TEST_CELL)
    locked = set()
    for cell in cells:
        meta = cell.metadata.get("nbgrader", {})
        if meta.get("locked") and not meta.get("grade") and cell.cell_type == "code":
            if not cell.source.startswith("%%"):  # a script written to a file binds nothing here
                locked |= _bound(cell.source)
    read = {
        node.id
        for node in ast.walk(ast.parse(test))
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load)
    }
    free = read - _bound(test) - set(dir(builtins))
    assert free and free <= locked, sorted(free - locked)
    assert {"launch", "workdir", "script_args", "reference_training"} <= free
    assert "nproc" not in read


@pytest.mark.parametrize("nproc", [1, 2, 8])
def test_exercise_3s_test_runs_two_ranks_whatever_the_set_up_says(nproc, watched, tmp_path):
    """An edited set-up (nproc = 1: one rank agrees with itself, and one process without DDP is
    the reference) changes nothing: the test launches two ranks and reads two."""
    fake = FakeLaunch(watched["right"])
    workdir = tmp_path / "work"
    workdir.mkdir()
    nb = _namespace(1, workdir, fake) | {"nproc": nproc}
    exec(ck.code_cell(DDP, TEST_CELL).split("### BEGIN HIDDEN TESTS")[0], nb)
    ((_, args, launched),) = fake.calls
    assert launched == 2 and args[args.index("--global-batch-size") + 1] == "8", fake.calls
    assert len(nb["ranks"]) == 2
    hidden = ck.code_cell(DDP, TEST_CELL).split("### BEGIN HIDDEN TESTS")[1]
    assert "world_size=2" in hidden and "nproc" not in hidden
