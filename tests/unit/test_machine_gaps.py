"""What a grading machine lacks (coursekit.machine_gaps) and what it changes in the grading on a GPU
(coursekit.gap_expectations): read from the lessons' own cells and fixtures, never a notebook run.
"""

from __future__ import annotations

import coursekit as ck
import pytest

DALI_CELLS = {"test_shapes_pipeline", "test_dali_loader"}


def test_without_dali_exactly_the_dali_exercises_score_zero():
    zero, left_out = ck.gap_expectations("05_dali_pipelines", {ck.DALI: "not installed"})
    assert set(zero) == DALI_CELLS and left_out == {}, (zero, left_out)
    tests = {
        c.metadata.nbgrader.grade_id: c.source
        for c in ck.nbgrader_cells(ck.read(ck.solution_path("05_dali_pipelines")), "test")
    }
    assert DALI_CELLS < set(tests), "lesson 05 has more test cells than the DALI ones"
    assert all(tests[cell].startswith("assert dali is not None, NO_DALI") for cell in DALI_CELLS)


def test_without_a_compiler_the_inductor_fixture_is_not_judged():
    zero, left_out = ck.gap_expectations("09_make_it_fast", {ck.COMPILER: "no C compiler"})
    compiled = {"right_compiled_data_on_device", "right_compiled_step"}  # Inductor on CUDA
    assert zero == {} and set(left_out) == compiled, (zero, left_out)
    # lesson 08's fixtures call torch.compile with the backend its tests pass: judged anyway
    assert ck.gap_expectations("08_profile_and_compile", {ck.COMPILER: "no C compiler"}) == ({}, {})


@pytest.mark.parametrize("lesson", ["05_dali_pipelines", "09_make_it_fast"])
def test_a_machine_that_lacks_nothing_changes_nothing(lesson):
    assert ck.gap_expectations(lesson, {}) == ({}, {})


@pytest.mark.parametrize(
    ("source", "needs"),
    [
        ('torch.compile(model, mode="reduce-overhead")', True),
        ('torch.compile(model, backend="inductor")', True),
        ("torch.compile(model, **options)", True),
        ('torch.compile(model, backend="eager")', False),
        ("torch.compile(f, fullgraph=True, backend=backend)", False),
        ("model = torch.jit.script(model)", False),
    ],
)
def test_calls_inductor(source, needs):
    assert ck.calls_inductor(source) is needs


def test_machine_gaps_reports_each_gap(tmp_path):
    def which(found):
        return lambda name: f"/usr/bin/{name}" if name in found else None

    def find_spec(missing):
        return lambda name: None if name in missing else object()

    (tmp_path / "Python.h").touch()
    full = dict(which=which({"gcc"}), find_spec=find_spec(()), environ={}, include=tmp_path)
    assert ck.machine_gaps(**full) == {}
    assert set(ck.machine_gaps(**{**full, "find_spec": find_spec({"nvidia.dali"})})) == {ck.DALI}

    def no_nvidia(name):
        raise ModuleNotFoundError(name)

    assert set(ck.machine_gaps(**{**full, "find_spec": no_nvidia})) == {ck.DALI}
    assert ck.machine_gaps(**{**full, "which": which({"clang"})}) == {}
    for lacking in (
        {"which": which(set())},  # no gcc, no clang
        {"which": which({"cc"})},  # Triton does not try cc
        {"environ": {"CC": "icx"}},  # Triton takes $CC alone when it is set
        {"include": tmp_path / "elsewhere"},  # no Python.h
    ):
        gaps = ck.machine_gaps(**{**full, **lacking})
        assert set(gaps) == {ck.COMPILER}, (lacking, gaps)
    assert "Python.h" in ck.machine_gaps(**{**full, "include": tmp_path / "elsewhere"})[ck.COMPILER]
