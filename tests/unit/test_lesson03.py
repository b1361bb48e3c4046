"""Lesson 03's input-bound measurement against an asynchronous GPU, simulated on a CPU.

The rehearsal (``coursetools.rehearsal``) cannot model timings, so the GPU-only behaviour the
lesson's Exercise 2 and its no-workers GPU check rely on is pinned here: a thread runs the queued
"kernels" (sleeps) in order, as a CUDA stream does, and ``torch.cuda.synchronize`` waits for it.
On that GPU a loop with no workers decodes the next batch while the queued step runs, so the
device's idle share (the loop's rate against the same step on decoded batches) follows the
overlapped model, while the time blocked in ``next()`` and the serial model do not. The cells
(``time_split``, ``input_bound_share``, ``idle`` and the GPU check) are the solution's own.

Two mistakes the text warns about are graded here in-process, with the solution's test cells:
a loader with ``drop_last`` (Exercise 1) and micro-batch losses divided by the number of steps
(Exercise 5), each caught with a message that names the cause.
"""

from __future__ import annotations

import json
import queue
import threading
import time

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
    exec(ck.code_cell(LESSON, "# @title GPU check: with no workers, the GPU runs"), lesson)
    records = [json.loads(line) for line in lesson["claims"].read_text().splitlines()]
    assert [r["kind"] for r in records] == ["precondition", "claim"]
    assert records[1]["passed"] is passed, records[1]


def test_a_short_step_next_to_decoding_is_not_validated(lesson):
    lesson["loader_stats"] = [gpucourse.loaders.LoaderStats("x", 1, 1, 0.0, 1.0)] * 2
    lesson["decode_ms"], lesson["step_ms"] = 100.0, 1.0  # an H100: overlap or not, ~99% idle
    exec(ck.code_cell(LESSON, "# @title GPU check: with no workers, the GPU runs"), lesson)
    records = [json.loads(line) for line in lesson["claims"].read_text().splitlines()]
    assert [(r["kind"], r["met"]) for r in records] == [("precondition", False)]


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
