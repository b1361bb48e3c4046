"""Lesson 03's input-bound measurement against an asynchronous GPU, simulated on a CPU.

The rehearsal (``coursetools.rehearsal``) cannot model timings, so the GPU-only behaviour the
lesson's Exercise 2 and its no-workers GPU check rely on is pinned here: a thread runs the queued
"kernels" (sleeps) in order, as a CUDA stream does, and ``torch.cuda.synchronize`` waits for it.
On that GPU a loop with no workers decodes the next batch while the queued step runs, so the
device's idle share (the loop's rate against the same step on decoded batches) follows the
overlapped model, while the time blocked in ``next()`` and the serial model do not. The cells
(``time_split``, ``input_bound_share``, ``idle`` and the GPU check) are the solution's own.

On a fast GPU this small CNN's step is a few percent of a batch's decoding (this course's GPU run on
an H200: 7.1 ms against 165.3 ms), and the overlapped and in-turns shares are then the same (96%):
the check could only say "not validated". So on a GPU the lesson widens the CNN until a step takes
at least three quarters of a batch's decoding. Its sizing cells run here against steps that grow
with the width as the square (compute-bound), the power 1.5 or linearly (memory-bound), on an
H200 (that run's numbers) and on a T4 (a step 8x the H200's, fp32 by the data sheets: 8.1 against
67 TFLOPS; decoding on Colab's 2 vCPUs 1x to 2x the H200 host's): each time the precondition then
holds and the check passes an overlapped loop and fails one that syncs, at a step that costs the
section at most 1.5x a decode-bound one.

Two mistakes the text warns about are graded here in-process, with the solution's test cells:
a loader with ``drop_last`` (Exercise 1) and micro-batch losses divided by the number of steps
(Exercise 5), each caught with a message that names the cause.
"""

from __future__ import annotations

import json
import queue
import threading
import time
from types import SimpleNamespace

import coursekit as ck
import pytest
import torch

import gpucourse

LESSON = "03_batching_pipelines"
DECODE_S, GPU_S, BATCHES = 0.03, 0.025, 12


class Stream:
    """A GPU stream: queued work runs in order on its own thread; ``synchronize`` waits for it."""

    def __init__(self) -> None:
        self.work: queue.Queue = queue.Queue()
        threading.Thread(target=self._run, daemon=True).start()

    def _run(self) -> None:
        while True:
            time.sleep(self.work.get())
            self.work.task_done()

    def step(self, gpu_s: float, synchronous: bool = False):
        def train_step(batch):
            self.work.put(gpu_s)  # queued: returns at once, as a CUDA step does
            if synchronous:  # a loop that reads loss.item() every step
                self.work.join()

        return train_step

    def synchronize(self, *_args, **_kwargs) -> None:
        self.work.join()


def decoding(n: int, decode_s: float):
    """Batches that the loop's own process decodes (a DataLoader with no workers)."""
    for _ in range(n):
        time.sleep(decode_s)
        yield (torch.zeros(4),)


# This course's GPU run on an H200 (docs/gpu-reports/2026-11-28-h200-lessons-03-04-08-01.md):
# batch 256 of 96 px, width 32.
H200_DECODE_MS, H200_STEP_MS = 165.3, 7.1
CHECK = "# @title GPU check: with no workers, the GPU runs"
SIZING = "# on a GPU: widen the CNN until"
RETIME = "# a wider model: the epoch with no workers"


def checked(lesson) -> list[dict]:
    exec(ck.code_cell(LESSON, CHECK), lesson)
    return [json.loads(line) for line in lesson["claims"].read_text().splitlines()]


@pytest.fixture
def lesson(monkeypatch, tmp_path):
    stream = Stream()
    monkeypatch.setattr(torch.cuda, "synchronize", stream.synchronize)
    monkeypatch.delenv("GPUCOURSE_REQUIRE_GPU", raising=False)
    monkeypatch.setenv("GPUCOURSE_CLAIMS", str(tmp_path / "claims.jsonl"))
    namespace = {"torch": torch, "gpucourse": gpucourse, "device": torch.device("cuda")}
    for needle in ("def time_split(", "def input_bound_share(", "def idle("):
        exec(ck.code_cell(LESSON, needle), namespace)
    namespace["stream"], namespace["claims"] = stream, tmp_path / "claims.jsonl"
    return namespace


def test_with_no_workers_a_queued_step_overlaps_decoding(lesson):
    waiting, total = lesson["time_split"](decoding(BATCHES, DECODE_S), lesson["stream"].step(GPU_S))
    device_idle = 1 - BATCHES * GPU_S / total  # the lesson's measured idle share
    decode_ms = 1e3 * waiting / BATCHES  # measured as the lesson measures it
    share = lesson["input_bound_share"]
    assert abs(device_idle - share(decode_ms, 1e3 * GPU_S, 0)) < 0.12, device_idle
    assert device_idle < share(decode_ms, 1e3 * GPU_S, 0, synchronous=True) - 0.15
    assert waiting / total > device_idle + 0.4, "the loop's wait is not the device's"


def test_a_gpu_bound_loop_spends_long_in_next_yet_the_device_is_busy(lesson):
    gpu_s = 0.03
    step = lesson["stream"].step(gpu_s)
    waiting, total = lesson["time_split"](decoding(BATCHES, 0.01), step)
    assert waiting / total >= 0.25  # what the old check asked: it passed here
    assert 1 - BATCHES * gpu_s / total < 0.15
    assert lesson["input_bound_share"](10, 30, 0) == 0


@pytest.mark.parametrize("synchronous, passed", [(False, True), (True, False)])
def test_the_gpu_check_fails_a_loop_that_syncs_every_step(lesson, synchronous, passed):
    measure = gpucourse.loaders.measure
    stream, device = lesson["stream"], lesson["device"]
    decoded = [(torch.zeros(4),)] * (BATCHES + 1)
    lesson["loader_stats"] = stats = [
        measure(decoded, stream.step(GPU_S), device=device),
        measure(decoding(BATCHES + 1, DECODE_S), stream.step(GPU_S, synchronous), device=device),
    ]
    lesson["decode_ms"], lesson["step_ms"] = 1e3 * stats[1].wait_s / stats[1].batches, 1e3 * GPU_S
    records = checked(lesson)
    assert [r["kind"] for r in records] == ["precondition", "claim"]
    assert records[1]["passed"] is passed, records[1]


def test_a_short_step_next_to_decoding_is_not_validated(lesson):
    """The H200's numbers before the sizing: 96% idle overlapped and 96% in turns."""
    lesson["loader_stats"] = [gpucourse.loaders.LoaderStats("x", 1, 1, 0.0, 1.0)] * 2
    lesson["decode_ms"], lesson["step_ms"] = H200_DECODE_MS, H200_STEP_MS
    records = checked(lesson)
    assert [(r["kind"], r["met"]) for r in records] == [("precondition", False)]
    assert records[0]["why"] == "idle 96% overlapped against 96% in turns"


class FakeCNN:
    def __init__(self, width):
        self.width = width

    def to(self, device):
        return self


def sized(device, decode_ms, step_ms_at, fits=lambda width: True, width=32):
    """The lesson's sizing cell, its step taking ``step_ms_at(width)`` ms: its namespace after."""
    benchmarked = []

    def benchmark(step, batch, *, device, min_run_time):
        benchmarked.append(step.width)
        if not fits(step.width):
            raise torch.OutOfMemoryError("CUDA out of memory (a fake one)")
        return SimpleNamespace(median=step_ms_at(step.width) / 1e3)

    namespace = {
        "torch": torch,
        "device": torch.device(device),
        "width": width,
        "decode_ms": decode_ms,
        "step_ms": step_ms_at(width),
        "decoded": None,
        "train_step": SimpleNamespace(width=width),
        "make_train_step": lambda model, device: SimpleNamespace(width=model.width),
        "gpucourse": SimpleNamespace(SmallCNN=FakeCNN, benchmark=benchmark),
        "benchmarked": benchmarked,
    }
    exec(ck.code_cell(LESSON, SIZING), namespace)
    return namespace


def grows(ms_at_32: float, power: float):
    """A step of ``ms_at_32`` at width 32 whose time grows as the width to ``power``."""
    return lambda width: ms_at_32 * (width / 32) ** power


# an H200 (this course's GPU run); a T4: a step 8x the H200's, decoding 1x to 2x slower
MACHINES = {
    "h200": (H200_DECODE_MS, H200_STEP_MS),
    "t4, decoding as fast": (H200_DECODE_MS, 8 * H200_STEP_MS),
    "t4, decoding 2x slower": (2 * H200_DECODE_MS, 8 * H200_STEP_MS),
}


@pytest.mark.parametrize("power", [1.0, 1.5, 2.0])
@pytest.mark.parametrize("machine", sorted(MACHINES))
def test_on_a_gpu_the_step_is_widened_until_overlap_and_turns_differ(lesson, machine, power):
    decode_ms, step_ms = MACHINES[machine]
    after = sized("cuda", decode_ms, grows(step_ms, power))
    width = after["step_width"]
    assert 32 < width <= 512 and width % 8 == 0, width  # GroupNorm's 4 groups divide it
    assert after["train_step"].width == width and after["step_ms"] == grows(step_ms, power)(width)
    ratio = after["step_ms"] / decode_ms
    assert 0.56 <= ratio <= 1.5, ratio  # told apart (below), and at most 1.5x a decode-bound loop
    assert list(after["tried"]) == [32, *after["benchmarked"]]
    # the GPU check on the sized step: an overlapped loop passes, one that syncs every step fails
    # ms per batch: overlapped, with the loop's launching (the H200's step at batch 1, 3.1 ms) and
    # 5% of decoding for jitter; in turns, a loop that syncs every step
    sized_ms = lesson["step_ms"] = after["step_ms"]
    lesson["decode_ms"] = decode_ms
    overlapped, in_turns = max(1.05 * decode_ms + 3.1, sized_ms), decode_ms + sized_ms
    for period, passed in [(overlapped, True), (in_turns, False)]:
        lesson["loader_stats"] = [
            gpucourse.loaders.LoaderStats("decoded", 31, 31 * 256, 0.0, 31 * sized_ms),
            gpucourse.loaders.LoaderStats("0 workers", 31, 31 * 256, 0.0, 31 * period),
        ]
        lesson["claims"].write_text("")
        records = checked(lesson)
        assert [r["kind"] for r in records] == ["precondition", "claim"], records
        assert records[1]["passed"] is passed, (period, records)


def test_the_widening_keeps_the_widest_model_that_fits_and_says_when_that_is_not_enough(lesson):
    after = sized("cuda", H200_DECODE_MS, grows(H200_STEP_MS, 1.0), fits=lambda w: w <= 256)
    assert after["step_width"] == after["train_step"].width == 160, after["tried"]
    assert after["benchmarked"] == [160, 352]  # 352 ran out of memory: 160 stays
    assert after["wider_step"] is None  # the model that did not fit is not kept alive
    lesson["loader_stats"] = [gpucourse.loaders.LoaderStats("x", 1, 1, 0.0, 1.0)] * 2
    lesson["decode_ms"], lesson["step_ms"] = H200_DECODE_MS, after["step_ms"]
    assert [(r["kind"], r["met"]) for r in checked(lesson)] == [("precondition", False)]


def test_on_a_cpu_the_model_keeps_its_width_and_its_epoch():
    after = sized("cpu", 10.0, grows(1.0, 2.0), width=16)
    assert after["step_width"] == 16 and after["benchmarked"] == [], after["tried"]
    assert after["train_step"].width == 16
    after["time_split"] = lambda *args: pytest.fail("the CPU's epoch is timed once")
    after |= {"make_loader": None, "dataset": None, "batch_size": 32, "steps_per_epoch": 8}
    exec(ck.code_cell(LESSON, RETIME), after)
    assert after["decode_ms"] == 10.0


def test_a_wider_model_times_the_epoch_again():
    after = sized("cuda", H200_DECODE_MS, grows(H200_STEP_MS, 2.0))
    timed = []

    def time_split(batches, step):
        timed.append(step.width)
        return 16 * 0.170, 16 * 0.175  # seconds blocked in next(), seconds for the epoch

    after |= {"time_split": time_split, "make_loader": lambda *args: None, "dataset": None}
    after |= {"batch_size": 256, "steps_per_epoch": 16}
    exec(ck.code_cell(LESSON, RETIME), after)
    assert timed == [after["step_width"]] and after["decode_ms"] == pytest.approx(170.0)
    assert after["total"] == pytest.approx(2.8)


def cell_source(grade_id: str) -> str:
    (found,) = [
        c.source
        for c in ck.read(ck.solution_path(LESSON)).cells
        if c.metadata.get("nbgrader", {}).get("grade_id") == grade_id
    ]
    return found


def graded(grade_id: str, answer: str, **names) -> str | None:
    """Run a test cell (visible and hidden tests) against an answer: None, or the failure's text."""
    namespace = {"torch": torch, "nn": torch.nn, "gpucourse": gpucourse, **names}
    exec(answer, namespace)
    try:
        exec(cell_source(grade_id), namespace)
    except AssertionError as error:
        return str(error)
    return None


LOADER_NAMES = dict(
    dataset=torch.utils.data.TensorDataset(torch.rand(20, 3, 8, 8), torch.arange(20) % 4),
    device=torch.device("cpu"),
    image_size=8,
)
DROP_LAST = ck.code_cell(LESSON, "def make_loader(").replace(
    "shuffle=True,", "shuffle=True, drop_last=True,"
)


def test_a_loader_that_drops_the_last_batch_loses_exercise_1_and_says_why():
    assert (
        graded("test_make_loader", ck.code_cell(LESSON, "def make_loader("), **LOADER_NAMES) is None
    )
    assert "drop_last" in graded("test_make_loader", DROP_LAST, **LOADER_NAMES)


def test_micro_batch_losses_divided_by_steps_fail_the_visible_test():
    names = {"images": torch.rand(12, 3, 16, 16), "labels": torch.arange(12) % 4, "device": "cpu"}
    exec(ck.code_cell(LESSON, "def gradients("), names)
    right = ck.code_cell(LESSON, "def accumulate_gradients(")
    assert graded("test_accumulate_gradients", right, **names) is None
    by_steps = right.replace("* (len(x) / len(inputs))", "/ steps")
    failure = graded("test_accumulate_gradients", by_steps, **names)
    assert "not 1 / steps" in failure, failure
