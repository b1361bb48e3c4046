"""Lesson 04's GPU checks, pinned on a CPU with synthetic measurements.

Each test takes a cell from the solution notebook as it stands and runs it with the values a GPU
would measure: for a T4, an H100 and an H200 the right path's values pass (the H200 figures are
this course's GPU run; T4 and H100 figures are datasheet arithmetic), and the broken path each
claim names fails (in strict mode, as the GPU runner runs it, a failed claim raises). A card that
cannot show an effect gets a precondition, recorded as "not validated", never a pass.
"""

from __future__ import annotations

import math
from types import SimpleNamespace

import coursekit as ck
import pytest
import torch

import gpucourse
from gpucourse import claims

LESSON = "04_mixed_precision"
CUDA = torch.device("cuda:0")
# names torch.cuda.get_device_name gives; A100 and H100 as their SXM and PCIe boards report them
T4, L4, A10G = "Tesla T4", "NVIDIA L4", "NVIDIA A10G"
A100, H100, H100_PCIE, H200 = (
    "NVIDIA A100-SXM4-80GB",
    "NVIDIA H100 80GB HBM3",
    "NVIDIA H100 PCIe",
    "NVIDIA H200",
)
UNKNOWN = "NVIDIA GeForce RTX 4090"  # a card gpucourse.bench.CARDS has no datasheet for


def gpu_check(title: str) -> str:
    return ck.gpu_check(LESSON, title)


def card(name: str, device=CUDA) -> dict:
    """What the lesson's datasheet cell makes of a GPU called ``name``."""
    namespace = {"gpucourse": gpucourse, "facts": SimpleNamespace(name=name), "device": device}
    exec(ck.code_cell(LESSON, "flop_per_byte = "), namespace)
    return namespace


@pytest.fixture
def strict(run_cell):
    """Run a GPU check as the GPU runner does (strict, recorded); returns this check's records."""

    def run(title, gpu=H200, **names):
        namespace = {"torch": torch, "gpucourse": gpucourse, "device": CUDA}
        known = card(gpu)
        namespace |= {k: known[k] for k in ("published", "fp32_peak", "flop_per_byte")}
        namespace |= {"compute_bound": known["compute_bound"], "facts": SimpleNamespace(name=gpu)}
        return run_cell(gpu_check(title), namespace | names, strict=True)

    return run


def kinds(records):
    return [(r["kind"], r.get("passed", r.get("met"))) for r in records]


# --- which cards the speed checks run on ---------------------------------------------------------
@pytest.mark.parametrize(
    "name, flop_per_byte, compute_bound",
    [
        (T4, 25.3, True),  # 8.1 TFLOP/s over 320 GB/s
        ("NVIDIA A100-SXM4-40GB", 12.5, True),
        (A100, 9.6, True),
        (H100, 20.0, True),
        (H100_PCIE, 25.5, True),
        (H200, 14.0, True),  # the course's GPU run: 13.96
        (L4, 101.0, False),  # memory-bound here: a tie is what right and broken both show
        (A10G, 58.3, False),
        (UNKNOWN, None, False),  # no datasheet: not validated, never a coin flip at 1.0x
    ],
)
def test_the_speed_checks_run_only_where_the_card_is_compute_bound(
    name, flop_per_byte, compute_bound
):
    namespace = card(name)
    if flop_per_byte is None:
        assert namespace["flop_per_byte"] is None
    else:
        assert namespace["flop_per_byte"] == pytest.approx(flop_per_byte, abs=0.1)
    assert namespace["compute_bound"] is compute_bound


def test_off_the_gpu_the_datasheet_cell_knows_no_card():
    namespace = card("12th Gen Intel(R) Core(TM) i7", device=torch.device("cpu"))
    assert namespace["card"]["known_as"] is None and namespace["flop_per_byte"] is None


# --- the runs are timed in turns -----------------------------------------------------------------
def test_interleaved_timing_hands_no_clock_drift_to_the_last_run():
    namespace = {}
    exec(ck.code_cell(LESSON, "def interleaved("), namespace)
    calls = []

    def drifting(name):  # three runs of the same speed on a clock that slows 8% a timing
        calls.append(name)
        return 10.0 * 1.08 ** len(calls)

    runs = ["fp32", "tf32", "AMP bfloat16"]
    medians = namespace["interleaved"](drifting, runs)
    assert calls == runs * 3  # in turns: A, B, C, A, B, C, ...
    assert medians["fp32"] / medians["AMP bfloat16"] > 1 / 1.2  # under 20%: no fake gap
    # timed one run after the other (three rounds each), AMP would look 1.26x slower than fp32
    in_a_row = [10.0 * 1.08**k for k in range(1, 10)]
    assert in_a_row[7] / in_a_row[1] > 1.2


def test_the_step_times_of_the_table_come_from_the_interleaved_helper():
    source = ck.code_cell(LESSON, "ms_per_step = ")
    assert "interleaved(step_ms, runs)" in source
    vocab = ck.code_cell(LESSON, "def matmul_ms(")
    assert "interleaved(matmul_ms, weights)" in vocab


# --- mixed precision and TF32 steps --------------------------------------------------------------
def _rows(fp32_ms, amp_ms, tf32_ms=None, amp="AMP bfloat16"):
    rows = {"fp32": {"ms per step": fp32_ms}, amp: {"ms per step": amp_ms}}
    return rows | ({"tf32": {"ms per step": tf32_ms}} if tf32_ms else {})


@pytest.mark.parametrize(
    "gpu, right, amp",
    [
        (H200, _rows(11.27, 6.07, 6.06), "AMP bfloat16"),  # the course's GPU run: 1.86x
        (H100, _rows(11.0, 6.0, 6.0), "AMP bfloat16"),  # same kernels as the H200's
        # an estimate: 60 ms of fp32 convolutions a step at a 70 W T4's clock, 10 to 15 in fp16
        (T4, _rows(90.0, 50.0, amp="AMP float16"), "AMP float16"),
    ],
)
def test_the_speed_checks_pass_a_right_run_and_fail_autocast_that_never_ran(
    strict, gpu, right, amp
):
    title = "mixed precision is at least 1.2x as fast"
    assert kinds(strict(title, gpu, measured=right, amp_name=amp)) == [
        ("precondition", True),
        ("claim", True),
    ]
    never_ran = {**right, amp: {"ms per step": right["fp32"]["ms per step"] / 1.02}}
    with pytest.raises(RuntimeError, match="at least 1.2x as fast as strict fp32"):
        strict(title, gpu, measured=never_ran, amp_name=amp)
    if "tf32" in right:
        title = "TF32 is at least 1.2x as fast"
        assert strict(title, gpu, measured=right)[-1]["passed"] is True
        left_off = {**right, "tf32": right["fp32"]}
        with pytest.raises(RuntimeError, match="TF32 is at least 1.2x"):
            strict(title, gpu, measured=left_off)


@pytest.mark.parametrize("gpu", [L4, A10G, UNKNOWN])
def test_on_a_memory_bound_or_unknown_card_the_speed_checks_are_not_validated(strict, gpu):
    tie = _rows(20.0, 21.0, 20.5)  # AMP a little slower: what an L4 may well show
    for title in ("mixed precision is at least 1.2x as fast", "TF32 is at least 1.2x as fast"):
        records = strict(title, gpu, measured=tie, amp_name="AMP bfloat16")
        assert kinds(records) == [("precondition", False)], records


def test_no_check_holds_the_peak_of_a_step():
    """Autocast that never ran gives a peak ratio of 1.0, as a right run does for this CNN: the
    ratio is shown, with the course's GPU run beside it, never checked."""
    nb = ck.read(ck.solution_path(LESSON))
    checks = [c.source for c in nb.cells if "gpu-check" in c.metadata.get("tags", [])]
    assert not any("peak of a step" in source for source in checks)
    shown = ck.code_cell(LESSON, 'peaks = {name: row["peak of a step (MiB)"]')
    namespace = {"amp_name": "AMP bfloat16"}
    namespace["measured"] = {
        name: {"peak of a step (MiB)": mib}
        for name, mib in {"fp32": 1888.29, "tf32": 1312.09, "AMP bfloat16": 1270.79}.items()
    }
    exec(shown, namespace)
    assert namespace["peaks"]["AMP bfloat16"] / namespace["peaks"]["tf32"] == pytest.approx(
        0.97, abs=0.01
    )


# --- autocast's op lists -------------------------------------------------------------------------
def _outputs(matmul_dtype, fp32_dtype=torch.float32):
    made = {"a @ a": torch.zeros(2, dtype=matmul_dtype)}
    return made | {
        n: torch.zeros(2, dtype=fp32_dtype) for n in ("softmax", "exp", "sum", "group_norm")
    }


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_the_autocast_check_fails_when_autocast_never_ran(strict, dtype):
    title = "a @ a runs in the autocast dtype"
    right = dict(outputs=_outputs(dtype), dtype=dtype, use_amp=True)
    assert kinds(strict(title, **right)) == [("precondition", True), ("claim", True)]
    with pytest.raises(RuntimeError, match="at least 5"):  # all five float32: measured 4
        strict(title, **{**right, "outputs": _outputs(torch.float32)})
    with pytest.raises(RuntimeError, match="at least 5"):  # the fp32 list ignored: 16-bit softmax
        strict(title, **{**right, "outputs": _outputs(dtype, fp32_dtype=dtype)})
    # a GPU without tensor cores keeps autocast off: nothing to check there
    off = dict(outputs=_outputs(torch.float32), dtype=torch.float32, use_amp=False)
    assert kinds(strict(title, "Tesla P100-PCIE-16GB", **off)) == [("precondition", False)]


# --- 16-bit matmuls ------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "gpu, right, cuda_cores, bound",
    [
        # fp32 and fp16 TFLOP/s; fp16 without tensor cores runs at 2x fp32 on Turing and Hopper
        (T4, {"fp32": 4.5, "fp16": 25.0}, {"fp32": 4.5, "fp16": 9.0}, 3),  # 70 W: ~5.5x
        (H100, {"fp32": 51.0, "fp16": 640.0, "bf16": 650.0}, {"fp32": 51.0, "fp16": 102.0}, 3),
        (H200, {"fp32": 51.2, "fp16": 645.9, "bf16": 658.8}, {"fp32": 51.2, "fp16": 102.4}, 3),
        # Ada runs fp16 without tensor cores at fp32's rate: 1x
        (L4, {"fp32": 20.0, "fp16": 80.0, "bf16": 80.0}, {"fp32": 20.0, "fp16": 20.0}, 2),
    ],
)
def test_16_bit_matmuls_must_beat_what_cuda_cores_give(strict, gpu, right, cuda_cores, bound):
    title = "16-bit matmuls run at least 3x"
    records = strict(title, gpu, tflops=right)
    assert kinds(records) == [("precondition", True)] * 2 + [("claim", True)]
    assert records[-1]["bound"] == f"at least {bound}x"
    with pytest.raises(RuntimeError, match=f"at least {bound}x strict fp32's rate"):
        strict(title, gpu, tflops=cuda_cores)  # 2x (1x on an L4): the tensor cores were missed


@pytest.mark.parametrize("gpu", [A10G, UNKNOWN])
def test_16_bit_matmuls_are_not_validated_without_a_4x_datasheet(strict, gpu):
    # an A10G's datasheet (as gpucourse.bench derives it) gives 16 bits only 2x its fp32 rate, as
    # GeForce cards do: a right run there may not reach 3x
    records = strict("16-bit matmuls run at least 3x", gpu, tflops={"fp32": 25.0, "fp16": 55.0})
    assert kinds(records) == [("precondition", True), ("precondition", False)]


def test_16_bit_matmuls_without_tensor_cores_are_not_validated(strict):
    records = strict("16-bit matmuls run at least 3x", "Tesla P100-PCIE-16GB", tflops={"fp32": 9.0})
    assert kinds(records) == [("precondition", False)]


# --- the padded vocabulary -----------------------------------------------------------------------
def _vocab_ms(odd_ms, padded_ms):
    return {"vocab 50257": odd_ms, "vocab 50304": padded_ms}


def test_the_padded_vocabulary_must_gain_something(strict):
    title = "the padded vocabulary is at least 10% faster"
    names = dict(vocab=50257, padded=50304, use_amp=True)
    h200 = strict(title, shape_ms=_vocab_ms(12.45, 2.565), **names)  # the course's GPU run
    assert kinds(h200) == [("precondition", True), ("claim", True)]
    # a T4 with the odd size off its 16-byte loads: 1.5x to 4x slower (estimate); half of it passes
    strict(title, T4, shape_ms=_vocab_ms(100.0, 70.0), **names)
    with pytest.raises(RuntimeError, match="at least 10% faster"):
        nothing_bought = _vocab_ms(2.565, 2.565 * 50304 / 50257)  # the work, and no more
        strict(title, shape_ms=nothing_bought, **names)
    off = {**names, "use_amp": False}  # no tensor cores: fp32 on CUDA cores, nothing to gain
    records = strict(title, "Tesla P100-PCIE-16GB", shape_ms=_vocab_ms(10.0, 10.0), **off)
    assert kinds(records) == [("precondition", False)]


def test_off_the_gpu_each_check_still_says_what_it_would_check(capsys, monkeypatch):
    monkeypatch.delenv(claims.CLAIMS_VAR, raising=False)
    cpu = torch.device("cpu")
    namespace = {"torch": torch, "gpucourse": gpucourse, "device": cpu}
    known = card("cpu", cpu)
    namespace |= {k: known[k] for k in ("published", "fp32_peak", "flop_per_byte", "compute_bound")}
    namespace |= {"facts": SimpleNamespace(name="cpu"), "amp_name": "AMP bfloat16"}
    namespace |= {"measured": _rows(5.66, 6.61), "tflops": {"fp32": 0.077, "bf16": 0.111}}
    exec(gpu_check("mixed precision is at least 1.2x as fast"), namespace)
    exec(gpu_check("16-bit matmuls run at least 3x"), namespace)
    out = capsys.readouterr().out.splitlines()
    assert len(out) == 2 and all(line.startswith("On a CUDA GPU this checks") for line in out)
    assert "at least 3x" in out[1] and not math.isnan(float(out[1].split("it is ")[1][:4]))


# --- loss parity ---------------------------------------------------------------------------------
def _ends(curves: dict, amp: str = "AMP bfloat16") -> dict:
    """What the lesson's end-level cell makes of three loss curves: fp32's drop, the gaps."""
    namespace = {"statistics": __import__("statistics"), "curves": curves, "amp_name": amp}
    exec(ck.code_cell(LESSON, "def end_level("), namespace)
    return {"drop": namespace["drop"], "end_gaps": namespace["end_gaps"], "amp_name": amp}


def _curve(first: float, last: float, wobble: float = 0.0, steps: int = 60) -> list[float]:
    """A loss curve from ``first`` down to ``last``, each step ``wobble`` up or down."""
    return [first + (last - first) * k / (steps - 1) + wobble * (-1) ** k for k in range(steps)]


def test_the_parity_check_fails_a_run_that_never_learned(strict):
    title = "mixed precision ends near fp32's level"
    fp32, another = _curve(1.42, 0.78, 0.03), _curve(1.40, 0.82, 0.03)  # two seeds, 0.04 apart
    # lr 0.02 at the lesson's GPU sizes, run on a CPU (fp32 starts at 1.44, as on the course's
    # H200): fp32 fell 0.58, a second seed ended 0.19 of that away, CPU bf16 ended 0.04 of it away
    right = _ends({"fp32": fp32, "fp32, another seed": another, "AMP bfloat16": _curve(1.42, 0.79)})
    assert kinds(strict(title, **right)) == [("precondition", True), ("claim", True)]
    lagging = _ends({"fp32": fp32, "fp32, another seed": another, "AMP bfloat16": [1.42] * 60})
    with pytest.raises(RuntimeError, match="within half of fp32's drop"):  # measured 1.0
        strict(title, **lagging)
    third = _ends({"fp32": fp32, "fp32, another seed": another, "AMP bfloat16": _curve(1.42, 1.2)})
    with pytest.raises(RuntimeError, match="within half of fp32's drop"):  # a third as far: 0.66
        strict(title, **third)


def test_the_parity_check_is_not_validated_where_the_run_cannot_tell(strict):
    title = "mixed precision ends near fp32's level"
    # two fp32 seeds end further apart than half of what fp32 learned: noise, not precision
    noisy = _ends(
        {
            "fp32": _curve(1.44, 1.0, 0.2),
            "fp32, another seed": _curve(1.44, 1.45, 0.2),  # this seed did not learn
            "AMP bfloat16": [1.44] * 60,
        }
    )
    assert kinds(strict(title, **noisy)) == [("precondition", False)]
    flat = _ends({name: [1.4] * 60 for name in ("fp32", "fp32, another seed", "AMP bfloat16")})
    assert flat["drop"] == 0
    assert kinds(strict(title, **flat)) == [("precondition", False)]  # no division by zero


# --- the other two checks of the table and the curves, unchanged, pinned here as well ------------
def test_what_is_saved_for_backward_shrinks_a_little_and_only_under_autocast(strict):
    title = "autocast saves 1% to 15% less for backward"

    def rows(amp_mib):
        saved = {"fp32": 1248.03, "AMP bfloat16": amp_mib}  # the course's GPU run: 1192.77
        return {name: {"saved for backward (MiB)": mib} for name, mib in saved.items()}

    assert strict(title, measured=rows(1192.77), amp_name="AMP bfloat16")[-1]["passed"] is True
    with pytest.raises(RuntimeError, match="1% to 15% less"):  # autocast never ran: 1.0
        strict(title, measured=rows(1248.03), amp_name="AMP bfloat16")
    with pytest.raises(RuntimeError, match="1% to 15% less"):  # group_norm off the fp32 list
        strict(title, measured=rows(700.0), amp_name="AMP bfloat16")


def test_the_fp16_scaler_may_skip_a_few_steps_only(strict):
    title = "the fp16 gradient scaler skips only a few steps"
    assert strict(title, use_scaler=False, skipped=0) == []  # bf16: a disabled scaler
    assert strict(title, T4, use_scaler=True, skipped=3)[-1]["passed"] is True
    with pytest.raises(RuntimeError, match="skips only a few"):
        strict(title, T4, use_scaler=True, skipped=30)


# --- TF32 matmuls: only where the datasheet promises a clear gain --------------------------------
@pytest.mark.parametrize(
    "gpu, right",
    [
        (H200, {"fp32": 51.2, "tf32": 343.0}),  # the course's GPU run: 6.7x
        (H100, {"fp32": 51.0, "tf32": 340.0}),  # datasheet 7.4x
        (A100, {"fp32": 19.0, "tf32": 120.0}),  # datasheet 8x
    ],
)
def test_tf32_matmuls_must_beat_strict_fp32_where_the_datasheet_gives_3x(strict, gpu, right):
    title = "TF32 matmuls run at least 1.5x"
    assert kinds(strict(title, gpu, tflops=right)) == [("precondition", True), ("claim", True)]
    with pytest.raises(RuntimeError, match="TF32 matmuls run at least 1.5x"):  # TF32 left off
        strict(title, gpu, tflops={"fp32": right["fp32"], "tf32": right["fp32"] * 1.02})


@pytest.mark.parametrize("gpu", [L4, A10G, UNKNOWN])
def test_tf32_matmuls_are_not_validated_without_a_3x_datasheet(strict, gpu):
    # an L4's datasheet gives TF32 1.98x fp32, an A10G's (AWS's figures) 1.0x: a right run may
    # measure 1.0-1.6x there; an unknown card has no datasheet at all
    records = strict("TF32 matmuls run at least 1.5x", gpu, tflops={"fp32": 30.0, "tf32": 33.0})
    assert kinds(records) == [("precondition", False)], records


def test_a_t4_has_no_tf32_row_to_check(strict):
    assert strict("TF32 matmuls run at least 1.5x", T4, tflops={"fp32": 4.5, "fp16": 25.0}) == []


def test_the_card_table_and_the_lesson_agree_on_the_a10g():
    peaks = card(A10G)["published"]
    assert peaks["tf32"] / peaks["fp32"] == pytest.approx(1.0)  # no faster than fp32
    assert peaks["bf16"] / peaks["fp32"] == pytest.approx(2.0)
    table = next(
        c.source for c in ck.read(ck.solution_path(LESSON)).cells if "| A10G |" in c.source
    )
    row = next(line for line in table.splitlines() if "| A10G |" in line)
    assert "tf32 no faster than fp32" in row and "2x its fp32 rate" in row


def test_the_matmul_formats_are_timed_in_turns():
    assert "interleaved(format_tflops, operands)" in ck.code_cell(LESSON, "tflops = interleaved(")


# --- Exercise 3 scores the same on every grader --------------------------------------------------
def _cell(grade_id: str) -> str:
    cells = ck.read(ck.solution_path(LESSON)).cells
    (found,) = [
        c.source for c in cells if c.metadata.get("nbgrader", {}).get("grade_id") == grade_id
    ]
    return found


def _graded(grade_id: str, answer: str, **names) -> str | None:
    """Run a test cell (visible and hidden tests) against an answer: None, or the failure."""
    namespace = {"torch": torch, "F": torch.nn.functional, "gpucourse": gpucourse, **names}
    namespace |= {"device": torch.device("cpu")} | names
    exec(ck.code_cell(LESSON, "def fp32_train_step("), namespace)
    exec(answer, namespace)
    try:
        exec(_cell(grade_id), namespace)
    except AssertionError as error:
        return str(error)
    return None


FP16_HARDCODED = next(f for f in ck.fixtures(LESSON) if f.name == "fp16_hardcoded")


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])  # a CPU or H100; a T4
def test_part_a_right_passes_and_a_hard_coded_fp16_fails_whatever_the_graders_dtype(dtype):
    """The lesson's dtype is the grader's: bf16 on a CPU, A100 or H100, fp16 on a T4 or V100.
    A dtype written in by hand fails on both: a T4 grader's visible test passes it, the hidden
    test's CPU check with bf16 does not."""
    assert _graded("test_amp_loss", _cell("amp_loss"), dtype=dtype) is None
    failure = _graded("test_amp_loss", FP16_HARDCODED.answers["amp_loss"], dtype=dtype)
    # a bf16 grader: the visible test; a T4 grader: the hidden test's CPU check with bf16
    expected = "expected torch.bfloat16" if dtype == torch.bfloat16 else "with torch.bfloat16"
    assert expected in (failure or ""), failure


def test_part_b_grades_the_fp16_branch_with_an_enabled_scaler(monkeypatch):
    """GPUCOURSE_AMP_DTYPE=float16 takes a T4's branch (fp16 + GradScaler) where bf16 would be
    picked: on a CPU, Exercise 3's tests then run with an enabled scaler, as on a T4 grader."""
    monkeypatch.setenv("GPUCOURSE_AMP_DTYPE", "float16")
    dtype, use_scaler = gpucourse.amp_dtype(gpucourse.device_facts("cpu"))
    assert (dtype, use_scaler) == (torch.float16, True)
    names = {"dtype": dtype, "use_scaler": use_scaler}
    assert _graded("test_scaled_step", _cell("scaled_step"), **names) is None
    assert _graded("test_amp_loss", _cell("amp_loss"), **names) is None
    # the visible test's scaler starts at 2**10: an fp16 first step cannot overflow and be skipped
    assert "GradScaler(device.type, init_scale=2.0**10, enabled=use_scaler)" in _cell(
        "test_scaled_step"
    )


@pytest.mark.parametrize(
    "capability, expected",
    [
        ((9, 0), (torch.float16, True)),
        ((7, 5), (torch.float16, True)),
        ((6, 1), (torch.float32, False)),
    ],
)
def test_the_fp16_override_changes_only_what_would_be_bf16(monkeypatch, capability, expected):
    import dataclasses

    facts = dataclasses.replace(gpucourse.device_facts("cpu"), compute_capability=capability)
    monkeypatch.setenv("GPUCOURSE_AMP_DTYPE", "float16")
    assert gpucourse.amp_dtype(facts) == expected
    monkeypatch.delenv("GPUCOURSE_AMP_DTYPE")
    assert gpucourse.amp_dtype(facts)[0] == (
        torch.bfloat16 if capability >= (8, 0) else expected[0]
    )


@pytest.mark.slow
@pytest.mark.parametrize("machine", ["t4", "h100"])
def test_a_hard_coded_fp16_loses_exercise_3a_on_a_t4_and_on_an_h100(machine):
    """The fixture in the CUDA rehearsal (a T4's facts: dtype float16, an enabled scaler; an
    H100's: bf16): the same cell fails, and only that one, on both."""
    from coursetools.rehearsal.kernel import run

    nb = ck.submission_from(ck.read(ck.solution_path(LESSON)), FP16_HARDCODED.answers)
    result = run(nb, machine, cwd=ck.solution_path(LESSON).parent)
    assert set(result.errors) == {"test_amp_loss"}, result.errors
    expected = "with torch.bfloat16" if machine == "t4" else "expected torch.bfloat16"
    assert expected in result.errors["test_amp_loss"], result.errors
