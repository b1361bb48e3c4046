"""What only a GPU can answer: the helpers checked against CUDA's own numbers.

Every test here is marked `gpu`: CPU runs deselect them (`-m "not gpu"`) and
`make test-gpu` runs them with GPUCOURSE_REQUIRE_GPU=1, where a machine
without a usable GPU is an error, never a skip. The `autograde` ones are its
grading run: every lesson's solution, untouched notebook and wrong-answer
fixtures autograded on the GPU, in the sandbox where bubblewrap can make one,
held to the scores `tests/grading/test_grading.py` expects on a CPU, less what
this machine cannot run (`coursekit.machine_gaps`: DALI's cells score 0 for
every submission, a fixture that needs a C compiler is not judged), each
recorded as a `not_validated` property that the runner reports. The small
assignment's autograde needs no GPU: it proves the grading stack the runner
installed (nbgrader without its user interface) before the lessons' grading,
and it is what a CPU rehearsal of the runner grades; with
GPUCOURSE_REHEARSAL=1 the lessons' grading runs on the CPU too, to time it.
"""

from __future__ import annotations

import gc
import os
import statistics
import subprocess
import sys

import coursekit as ck
import pytest
import torch
from torch import nn

import gpucourse
from gpucourse import bench, doctor, memory

pytestmark = pytest.mark.gpu
MiB, GiB = 2**20, 2**30


@pytest.fixture(scope="module")
def cuda():
    """The GPU. Without one: a skip, or in strict mode a RuntimeError (a GPU runner never skips)."""
    device = gpucourse.choose_device(verbose=False)
    if device.type != "cuda":
        pytest.skip("needs a CUDA GPU")
    return device


def _event_seconds(fn, repeats: int = 15) -> float:
    """Median seconds per call of ``fn``, timed by CUDA events around blocks of about 50 ms."""
    for _ in range(3):
        fn()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    fn()
    end.record()
    end.synchronize()
    inner = max(1, int(50 / start.elapsed_time(end)))  # elapsed_time is in milliseconds
    times = []
    for _ in range(repeats):
        start.record()
        for _ in range(inner):
            fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / 1e3 / inner)
    return statistics.median(times)


def test_benchmark_agrees_with_cuda_events_on_a_large_matmul(cuda):
    generator = torch.Generator(device=cuda).manual_seed(0)
    a, b = (torch.randn(4096, 4096, device=cuda, generator=generator) for _ in range(2))
    with bench._tf32(False):
        before = _event_seconds(lambda: torch.matmul(a, b))
        timing = gpucourse.benchmark(torch.matmul, a, b, device=cuda, min_run_time=0.5, warmup=3)
        after = _event_seconds(lambda: torch.matmul(a, b))
    events = (before + after) / 2  # either side of the benchmark, so a clock change shows in both
    assert timing.median == pytest.approx(events, rel=0.05), (
        f"benchmark {timing.median * 1e3:.3f} ms vs CUDA events {before * 1e3:.3f} / "
        f"{after * 1e3:.3f} ms"
    )


def test_peak_memory_matches_the_allocator(cuda):
    model = nn.Linear(1024, 1024).to(cuda)
    model(torch.randn(8, 1024, device=cuda)).sum().backward()  # gradients left by an earlier step

    def step():
        big = torch.empty(256 * MiB, dtype=torch.uint8, device=cuda)
        small = torch.empty(64 * MiB, dtype=torch.uint8, device=cuda)
        del big, small

    kept = torch.empty(
        32 * MiB, dtype=torch.uint8, device=cuda
    )  # allocated before: not part of the peak
    before = torch.cuda.memory_allocated(cuda)
    assert memory.peak_memory(step, cuda, model=model) == 320 * MiB
    assert before - torch.cuda.memory_allocated(cuda) == sum(
        p.nbytes for p in model.parameters()
    ), "gradients dropped"
    assert torch.cuda.max_memory_allocated(cuda) - torch.cuda.memory_allocated(cuda) == 320 * MiB
    del kept


def test_saved_tensor_meter_matches_the_allocator(cuda):
    model = nn.Sequential(nn.Linear(1024, 4096), nn.ReLU(), nn.Linear(4096, 1024)).to(cuda)
    x = torch.randn(4096, 1024, device=cuda)
    model(x).sum().backward()  # warm-up: cuBLAS takes its workspace from the allocator once
    model.zero_grad(set_to_none=True)
    torch.cuda.synchronize(cuda)
    before = torch.cuda.memory_allocated(cuda)
    with memory.SavedTensorMeter(exclude=[x]) as meter:
        out = model(x)
    torch.cuda.synchronize(cuda)
    grown = torch.cuda.memory_allocated(cuda) - before
    assert meter.live == 4096 * 4096 * 4, (
        "the ReLU output, saved once for ReLU and the second Linear"
    )
    assert grown == pytest.approx(meter.live + out.numel() * 4, abs=MiB), (
        "what autograd keeps, plus the output"
    )
    del out


def test_the_memory_cap_limits_reserved_memory_and_recovery_returns_to_baseline(cuda):
    gc.collect()
    torch.cuda.empty_cache()
    baseline = torch.cuda.memory_allocated(cuda)
    total = torch.cuda.get_device_properties(cuda).total_memory
    cap = GiB + torch.cuda.memory_reserved(cuda)

    def try_batch(batch_size):
        activations = torch.empty(batch_size * 16 * MiB, dtype=torch.uint8, device=cuda)
        return activations.sum()

    try:
        torch.cuda.set_per_process_memory_fraction(cap / total, cuda)
        torch.cuda.reset_peak_memory_stats(cuda)  # peaks from here on: under the cap
        fits = torch.empty(256 * MiB, dtype=torch.uint8, device=cuda)
        with pytest.raises(torch.OutOfMemoryError):
            torch.empty(2 * GiB, dtype=torch.uint8, device=cuda)
        del fits
        largest = 0
        for batch_size in (
            4,
            8,
            16,
            32,
            64,
            128,
            256,
            512,
            1024,
        ):  # double until the cap refuses (lesson 07's finder)
            try:
                try_batch(batch_size)
            except torch.OutOfMemoryError:
                break
            largest = batch_size
        gc.collect()
        torch.cuda.empty_cache()
        assert batch_size > largest and largest * 16 * MiB <= cap, (
            f"an OOM after batch {largest}, under the cap"
        )
        assert largest >= 32, f"about {cap // (16 * MiB)} batches fit under the cap, {largest} did"
        assert torch.cuda.max_memory_reserved(cuda) <= cap, (
            "the cap bounds what the allocator reserves"
        )
    finally:
        torch.cuda.set_per_process_memory_fraction(1.0, cuda)
    gc.collect()
    torch.cuda.empty_cache()
    assert torch.cuda.memory_allocated(cuda) == baseline, "every try was freed"
    assert torch.empty(2 * GiB, dtype=torch.uint8, device=cuda).numel() == 2 * GiB, (
        "the cap is lifted"
    )


def test_device_facts_agree_with_torch_and_the_driver(cuda):
    facts = gpucourse.device_facts(cuda)
    props = torch.cuda.get_device_properties(cuda)
    assert facts.name == torch.cuda.get_device_name(cuda)
    assert (
        facts.compute_capability
        == torch.cuda.get_device_capability(cuda)
        == (props.major, props.minor)
    )
    assert facts.processors == props.multi_processor_count
    assert facts.total_memory_gib == pytest.approx(props.total_memory / GiB, abs=0.01)
    with torch.cuda.device(cuda):
        assert facts.bf16 == torch.cuda.is_bf16_supported(including_emulation=False)
    assert facts.tf32 == facts.bf16 == (facts.compute_capability >= (8, 0))
    dtype, use_scaler = gpucourse.amp_dtype(facts)
    assert dtype == (torch.bfloat16 if facts.bf16 else torch.float16) and use_scaler == (
        not facts.bf16
    )
    with torch.autocast(device_type="cuda", dtype=dtype):
        assert (torch.ones(8, 8, device=cuda) @ torch.ones(8, 8, device=cuda)).dtype == dtype
    assert torch.amp.GradScaler("cuda", enabled=use_scaler).is_enabled() == use_scaler
    driver = doctor.probe_driver()
    capability = ".".join(map(str, facts.compute_capability))
    assert any(
        g["name"] == facts.name and g["compute_capability"] == capability for g in driver["gpus"]
    ), driver


def test_pinned_host_memory_copies_faster_than_pageable(cuda):
    pageable = bench._copy_gbps(cuda, 256 * MiB, 0.3, source="pageable")
    pinned = bench._copy_gbps(cuda, 256 * MiB, 0.3, source="pinned")
    assert pinned > pageable, f"pinned {pinned:.1f} GB/s vs pageable {pageable:.1f} GB/s"


def test_bench_card_on_the_gpu(cuda):
    facts = gpucourse.device_facts(cuda)
    card = bench.measure(cuda, min_run_time=0.1)
    rows = {row["key"]: row for row in card["rows"]}
    assert card["gpu"] and card["name"] == facts.name
    for key in ("fp32", "fp16", "d2d", "h2d_pageable", "h2d_pinned"):
        assert rows[key]["value"] > 0, key
    if facts.bf16:
        assert rows["bf16"]["value"] > rows["fp32"]["value"], "bf16 tensor cores beat strict fp32"
        assert rows["tf32"]["value"] > rows["fp32"]["value"], "TF32 tensor cores beat strict fp32"
    for row in rows.values():
        if row["ratio"] is not None:
            assert 0 < row["ratio"] <= 1.05, (
                f"{row['what']}: above the card's peak: the table or the timing is wrong"
            )
    if card["known_as"] is None:
        assert all(row["ratio"] is None for row in rows.values())


# ---- grading on the GPU
# ------------------------------------------------------------------------------------------
def test_autograde_sandbox_passes_the_gpu_through(cuda, tmp_path):
    """A kernel in the grading sandbox (coursetools.grading: GPUs and driver libraries bound) sees
    the GPU."""
    from coursetools.grading import sandbox

    problem = sandbox.sandbox_problem()
    if problem:
        pytest.skip(f"grading on the GPU ran without the sandbox: {problem}")
    devices, libraries = sandbox.gpu_passthrough()
    command = sandbox.sandbox_command(
        [
            sys.executable,
            "-c",
            "import torch; print(torch.cuda.is_available(), torch.cuda.get_device_name())",
        ],
        workdir=str(tmp_path),
        runtime=str(tmp_path),
        memory=0,
        cpu_seconds=300,
        devices=devices,
        libraries=libraries,
        python_dirs=sandbox.python_dirs(sys.executable),
        environ=dict(os.environ),
    )
    done = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert done.stdout.split(maxsplit=1) == ["True", torch.cuda.get_device_name(cuda) + "\n"], (
        done.stdout + done.stderr
    )


def test_autograde_a_small_assignment_with_the_installed_grading_stack(tmp_path):
    """nbgrader autograde of a three-exercise assignment, in this environment: the right answers
    score full marks, a wrong one loses exactly its point. No GPU needed (the runner's CPU rehearsal
    runs it too)."""
    course = ck.sandbox_course(tmp_path)
    student = ck.read(course / "release" / ck.SANDBOX_ASSIGNMENT / ck.SANDBOX_NAME)
    right = {
        name: f"def {name}(x):\n    return {body}"
        for name, (body, _, _) in ck.SANDBOX_EXERCISES.items()
    }
    for who, answers in (
        ("right", right),
        ("wrong", {**right, "square": "def square(x):\n    return x + x"}),
    ):
        nb = ck.submission_from(student, answers)
        ck.submit_as(course, who, ck.SANDBOX_ASSIGNMENT, ck.SANDBOX_NAME, nb)
    result = ck.nbgrader(course, "autograde", ck.SANDBOX_ASSIGNMENT, "--force", check=False)
    assert result.returncode == 0, result.stdout + result.stderr
    for who, lost in (("right", set()), ("wrong", {"test_square"})):
        scores = ck.scores_of(course, ck.SANDBOX_ASSIGNMENT, ck.SANDBOX_NAME, who)
        assert {g for g, (score, top, _) in scores.items() if score != top} == lost, (who, scores)


@pytest.fixture
def grader(request, monkeypatch) -> str:
    """What grades (its name): the GPU, in strict mode (a kernel that cannot see it fails its set-up
    cell). In the runner's CPU rehearsal (GPUCOURSE_REHEARSAL=1, which times the grading on a
    stand-in machine) this CPU, not strict, held to the scores a GPU must give."""
    if os.environ.get("GPUCOURSE_REHEARSAL") == "1":
        monkeypatch.delenv("GPUCOURSE_REQUIRE_GPU", raising=False)
        return "this CPU (a rehearsal)"
    device = request.getfixturevalue("cuda")
    monkeypatch.setenv("GPUCOURSE_REQUIRE_GPU", "1")
    return torch.cuda.get_device_name(device)


def machine_expectations(lesson: str, record_property) -> tuple[set[str], set[str]]:
    """(test cells that score 0 for every submission here, fixtures not judged here), from what this
    machine lacks (ck.machine_gaps); each recorded as a `not_validated` property of the test, which
    the GPU runner reads from the JUnit XML and reports as not validated, never failed."""
    gaps = ck.machine_gaps()
    zero, left_out = ck.gap_expectations(lesson, gaps)
    for gap, why in gaps.items():
        cells = [cell for cell, cause in zero.items() if cause == gap]
        if cells:
            said = f"{lesson} {', '.join(cells)}: {why}; expected 0 for every submission"
            record_property("not_validated", said)
        for name in (name for name, cause in left_out.items() if cause == gap):
            record_property("not_validated", f"{lesson} fixture {name}: {why}: not judged")
    return set(zero), set(left_out)


@pytest.mark.parametrize("lesson", ck.lessons())
def test_autograde_on_the_gpu(grader, lesson, tmp_path, monkeypatch, record_property):
    """The solution scores full marks, the untouched notebook zero, each fixture loses exactly its
    cells' points; what this machine cannot run (ck.gap_expectations) scores 0 for every submission
    or is not judged, and is recorded as not validated."""
    monkeypatch.delenv("GPUCOURSE_CLAIMS", raising=False)
    zero, left_out = machine_expectations(lesson, record_property)
    course = ck.scratch_course(tmp_path, [lesson])
    student, answers = ck.read(ck.student_path(lesson)), ck.solution_answers(lesson)
    submitted = {}
    for name, nb, wrong in [
        ("solution", ck.submission_from(student, answers), set()),
        ("untouched", student, None),
        *[
            (f.name, ck.submission_from(student, {**answers, **f.answers}), f.wrong)
            for f in ck.fixtures(lesson)
            if f.name not in left_out
        ],
    ]:
        path = ck.submit(course, name, lesson, nb)
        submitted[name] = (path, path.read_bytes(), wrong)
    result = ck.nbgrader(course, "autograde", lesson, "--force", check=False)
    assert result.returncode == 0, result.stdout + result.stderr
    problems = ck.autograde_problems(course, lesson, submitted, unscorable=zero)
    assert not problems, f"{lesson} graded on {grader}:\n" + "\n".join(problems)
