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

import coursekit as ck
import pytest
from coursetools.rehearsal.kernel import Run, run


def rehearse(lesson: str, machine: str, fixture: str | None = None) -> Run:
    nb = ck.read(ck.solution_path(lesson))
    if fixture:
        (chosen,) = [f for f in ck.fixtures(lesson) if f.name == fixture]
        nb = ck.submission_from(nb, chosen.answers)
    return run(nb, machine, cwd=ck.solution_path(lesson).parent)


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
def test_lesson_09_data_kept_on_an_h100_keeps_its_marks():
    """The route the lesson offers, the decoded set moved to the device once and indexed there
    (plus a compiled model), copies the data and draws each epoch's order as blocking copies of
    its own: a few per epoch, never one per step."""
    result = rehearse("09_make_it_fast", "h100", fixture="right_compiled_data_on_device")
    assert result.errors == {}, result.errors


@pytest.mark.slow
def test_lesson_05_on_a_gpu_without_dali():
    """A machine without DALI: its exercises cannot run (the machine's gap, said so), and no GPU
    check passes or fails for a decode that never happened."""
    result = rehearse("05_dali_pipelines", "l4:1:dali")
    assert set(result.errors) == {"test_shapes_pipeline", "test_dali_loader"}, result.errors
    assert all("DALI is not installed" in e for e in result.errors.values()), result.errors
    verdicts = {c["claim"]: c["passed"] for c in result.claims if c["kind"] == "claim"}
    assert verdicts and set(verdicts.values()) == {None}, verdicts
