"""Lessons on the CUDA path, rehearsed on this CPU (``coursetools.rehearsal``: placement, the
synchronizations CUDA reports, the machines learners rent, what those machines lack).

Each test runs a lesson's code cells at nbgrader's sizes (demo cells left out) in a kernel that
rehearses a GPU, with the solution's or a fixture's answers, and reads which graded cells failed
and what the GPU checks recorded. The GPU-only mistakes of single exercises are rehearsed
in-process, in the lesson's unit tests (tests/unit/test_lesson09.py). What the rehearsal cannot
model (timings, kernels and numerics, CUDA memory statistics, DataParallel, compiling) is not
asserted here: a claim on seconds is this CPU's.
"""

from __future__ import annotations

import json
import os

import coursekit as ck
import pytest
import torch
from coursetools import rehearsal
from coursetools.rehearsal.kernel import Run, run

import gpucourse


def rehearse(lesson: str, machine: str, fixture: str | None = None) -> Run:
    nb = ck.read(ck.solution_path(lesson))
    if fixture:
        (chosen,) = [f for f in ck.fixtures(lesson) if f.name == fixture]
        nb = ck.submission_from(nb, chosen.answers)
    return run(nb, machine, cwd=ck.solution_path(lesson).parent)


# Each lesson once, on the machine where its GPU path differs most from the CPU's: the submission
# that holds its right answers written another way (the solution's other answers beside them), or
# the solution where those right answers replace every answer and are plain Python or pandas.
MACHINES = {
    ("01_verify_gpu", None): "h100:8",  # eight GPUs to count and pick from
    ("02_tensors_on_device", "right_double_quotes"): "a100",
    ("03_batching_pipelines", "right_other_idioms"): "t4",  # Colab's 2 vCPUs: one loader worker
    ("04_mixed_precision", "right_any_device"): "t4",  # fp16 with a GradScaler, no bf16
    ("10_gpu_dataframes", "right_other_idioms"): "t4:1:colab-pandas,rapids",
    # one GPU: the graded ranks run on gloo as everywhere, the claims record that they did not run
    ("11_fsdp_sharding", "right_other_idioms"): "t4",
}
# Not rehearsed whole, each for what the rehearsal cannot model (their GPU-only logic is pinned
# in-process below and in the unit tests): 06's DataParallel demo and NCCL ranks, 07's CUDA memory
# statistics, 08's compiling.


@pytest.mark.slow
@pytest.mark.parametrize(("lesson", "fixture"), sorted(MACHINES), ids=lambda v: v or "solution")
def test_every_graded_cell_passes_on_the_cuda_path(lesson, fixture):
    result = rehearse(lesson, MACHINES[lesson, fixture], fixture=fixture)
    assert result.errors == {}, result.errors


@pytest.mark.slow
def test_lesson_09_on_a_t4():
    """Every graded cell passes on the CUDA path (the visible test of Ex.3 copies as the settings
    say); the synchronization counts the text states hold: five a step for the baseline, a few
    an epoch for the fast program (the model's one-time parameter copies counted)."""
    result = rehearse("09_make_it_fast", "t4")
    assert result.errors == {}, result.errors
    baseline = result.claim("the baseline synchronizes at least 3 times per training step")
    fast = result.claim("fast_train synchronizes at most")
    assert baseline["passed"] and fast["passed"], (baseline, fast)


@pytest.mark.slow
@pytest.mark.parametrize(
    "fixture, machine", [("right_compiled_data_on_device", "h100"), ("right_static_buffers", "t4")]
)
def test_lesson_09_other_right_routes_keep_their_marks(fixture, machine):
    """The route the lesson offers, the decoded set moved to the device once and indexed there
    (plus a compiled model), copies the data and draws each epoch's order as blocking copies of
    its own: a few per epoch, never one per step. Batches copied into static buffers on the device
    (`copy_`, non-blocking from pinned memory) are copies the grader counts, and no sync."""
    result = rehearse("09_make_it_fast", machine, fixture=fixture)
    assert result.errors == {}, result.errors


@pytest.mark.slow
def test_lesson_09_a_settings_mistake_costs_exercise_2_alone_on_a_t4():
    """Blocking copies in the settings (a CPU habit) are Exercise 2's mistake: on a GPU grader the
    grader's own epoch, which Exercise 4 runs, still copies asynchronously, so they cost Exercise 4
    nothing; the epoch's kept graph costs Exercise 3."""
    result = rehearse("09_make_it_fast", "t4", fixture="keeps_graph")
    assert set(result.errors) == {"test_fast_settings", "test_fast_epoch"}, result.errors


@pytest.mark.slow
def test_lesson_05_on_a_gpu_without_dali():
    """A machine without DALI: its exercises cannot run (the machine's gap, said so), exactly the
    cells a GPU grader expects to score 0 there (ck.gap_expectations), and no GPU check passes or
    fails for a decode that never happened."""
    result = rehearse("05_dali_pipelines", "l4:1:dali")
    (zero, _) = ck.gap_expectations("05_dali_pipelines", {ck.DALI: "no DALI on the rehearsed L4"})
    assert set(result.errors) == set(zero), (result.errors, zero)
    assert all("DALI is not installed" in e for e in result.errors.values()), result.errors
    verdicts = {c["claim"]: c["passed"] for c in result.claims if c["kind"] == "claim"}
    assert verdicts and set(verdicts.values()) == {None}, verdicts


# Lesson 08, in this process: its cells on the rehearsed CUDA path, at nbgrader's sizes.
PROFILE = "08_profile_and_compile"
PROFILE_CELLS = (
    "import torch.nn.functional as F",
    "batch_size = gpucourse.workload",
    "model = gpucourse.SmallCNN().to(device)\noptimizer",
    "from torch.profiler import ProfilerActivity",
    "SYNCS = ",
    "def slow_epoch(",
    "def fast_epoch(",
)


def lesson_08_on(machine: str) -> dict:
    namespace = {"__name__": "__main__", "gpucourse": gpucourse, "torch": torch}
    namespace["device"] = gpucourse.choose_device(verbose=False)
    for needle in PROFILE_CELLS:
        exec(ck.code_cell(PROFILE, needle), namespace)
    return namespace


def test_lesson_08_counts_each_loops_own_waits_on_cuda(monkeypatch):
    """The side-by-side counts on a GPU: the slow loop's three waits a step (two blocking copies,
    one .item()) and the fast loop's one read, not the profiler's own synchronize at its exit."""
    monkeypatch.setenv("NBGRADER_EXECUTION", "autograde")
    with rehearsal.Rehearsal("t4"):
        nb = lesson_08_on("t4") | {"sort_by": "self_cpu_time_total"}
        exec(ck.code_cell(PROFILE, "slow_loss, slow_profile = profile_epoch(slow_epoch"), nb)
        side_by_side = ck.code_cell(PROFILE, 'profiles_by_loop = {"slow"').rsplit("\n", 1)
        exec(side_by_side[0], nb)
        counts = eval(side_by_side[1], nb)
    assert counts == {"slow": 3 * len(nb["batches"]), "fast": 1}, counts


def test_lesson_08_sees_a_copy_to_cuda_written_without_an_index(monkeypatch):
    """`.to("cuda", non_blocking=True)` is a copy to the device (cuda:0) as much as
    `.to(device)`: Exercise 2's test, on the rehearsed T4, keeps its points."""
    monkeypatch.setenv("NBGRADER_EXECUTION", "autograde")
    with rehearsal.Rehearsal("t4"):
        nb = lesson_08_on("t4")
        answer = ck.code_cell(PROFILE, "def fast_epoch(").replace(".to(device,", '.to("cuda",')
        assert answer.count('.to("cuda",') == 2
        exec(answer, nb)
        exec(ck.code_cell(PROFILE, "def twins():"), nb)


@pytest.mark.parametrize("gpus", [1, 2, 5, 8])
def test_lesson_06_grades_the_same_job_on_any_number_of_gpus(gpus):
    """Exercise 3's job (ranks, batches) does not depend on the grader's GPUs: with more ranks a
    partial last batch would make `drop_last=True`, a right idiom, change the experiment."""
    with rehearsal.Rehearsal("h100", gpus=gpus):
        nb = {"gpus": torch.cuda.device_count()}
        exec(ck.code_cell("06_data_parallel", 'backend = "nccl" if gpus >= 2'), nb)
        job = ck.code_cell("06_data_parallel", "settings = dict(samples=48").split("\n")
        exec(next(line for line in job if line.startswith("settings = ")), nb)
    assert (nb["backend"], nb["nproc"]) == ("gloo" if gpus == 1 else "nccl", 2)
    per_rank = nb["settings"]["samples"] // nb["nproc"]
    assert per_rank % (nb["settings"]["global_batch_size"] // nb["nproc"]) == 0  # no partial batch


def test_lesson_08_on_a_gpu_without_a_compiler_claims_no_compiled_speed_up(tmp_path, monkeypatch):
    """No C compiler: the precondition is unmet, and the compiled step's claim did not run (it
    used to pass at a default of 1.0)."""
    monkeypatch.setenv("GPUCOURSE_CLAIMS", str(tmp_path / "claims.jsonl"))
    with rehearsal.Rehearsal("l4", gaps=("compiler",)):
        nb = {"os": os, "torch": torch, "gpucourse": gpucourse}
        nb["device"] = gpucourse.choose_device(verbose=False)
        for needle in (
            "import torch._inductor.config",
            "# @title GPU check: a C",
            "# @title GPU check: the compiled inference",
        ):
            exec(ck.code_cell(PROFILE, needle), nb)
    records = (tmp_path / "claims.jsonl").read_text().splitlines()
    verdicts = [(r["kind"], r.get("met"), r.get("passed")) for r in map(json.loads, records)]
    assert verdicts == [("precondition", False, None), ("claim", None, None)], verdicts
