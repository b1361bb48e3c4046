"""The logic behind lessons 05-08's GPU checks, pinned on a CPU with fakes.

Each test reads the code it checks from the solution notebook (the lesson is the source), runs it
against fake clocks, fake GPUs or small scripts, and shows that it tells the right path from the
broken one the claim names.
"""

from __future__ import annotations

import ast
import json
import os
import re
import statistics
import subprocess
import sys
import time

import coursekit as ck
import numpy as np
import pytest

PROFILE = "08_profile_and_compile"
DDP = "06_data_parallel"
OOM = "07_troubleshooting_oom"


def _interleaved():
    namespace = {"statistics": statistics, "time": time}
    exec(ck.code_cell(PROFILE, "def interleaved("), namespace)
    return namespace["interleaved"]


def _bound(lesson: str, claim_text: str, word: str) -> float:
    """The ``at_least``/``at_most`` of the GPU check whose claim text starts with ``claim_text``."""
    source = ck.code_cell(lesson, claim_text)
    assert "# @title GPU check:" in source, f"{claim_text!r} is not in a GPU-check cell"
    return float(re.search(rf"{word}=([0-9.e-]+)", source).group(1))


class DriftingClock:
    """A clock on which each run takes ``drift`` times longer than the one before (a warming T4)."""

    def __init__(self, drift: float):
        self.now, self.factor, self.drift = 0.0, 1.0, drift

    def __call__(self) -> float:
        return self.now

    def run(self, seconds: float):
        def step():
            self.now += seconds * self.factor
            self.factor *= self.drift

        return step


def test_interleaved_timing_sees_a_2x_gap_through_a_drift_that_hides_it_from_sequential_timing():
    interleaved = _interleaved()
    clock = DriftingClock(drift=1.1)
    slow, fast = interleaved(clock.run(2.0), clock.run(1.0), rounds=7, clock=clock)
    assert 1.7 < slow / fast < 2.0  # each pair of runs sees the same clocks

    sequential = DriftingClock(drift=1.1)  # what timing all slow runs, then all fast ones, reports
    slow_runs, fast_runs = sequential.run(2.0), sequential.run(1.0)
    first = [(sequential(), slow_runs(), sequential())[::2] for _ in range(7)]
    then = [(sequential(), fast_runs(), sequential())[::2] for _ in range(7)]
    naive = statistics.median(b - a for a, b in first) / statistics.median(b - a for a, b in then)
    assert naive < 1.1  # the drift ate the gap: the flake the lesson's old claim had


def test_interleaved_timing_waits_for_queued_gpu_work_before_reading_the_clock():
    interleaved = _interleaved()

    class FakeGPU:
        def __init__(self):
            self.now, self.queued = 0.0, 0.0

        def __call__(self):
            return self.now

        def sync(self):
            self.now, self.queued = self.now + self.queued, 0.0

        def run(self, seconds):
            def launch():
                self.queued += seconds

            return launch

    gpu = FakeGPU()
    slow, fast = interleaved(gpu.run(3.0), gpu.run(1.5), rounds=5, clock=gpu, sync=gpu.sync)
    assert (slow, fast) == (3.0, 1.5)
    unsynced = FakeGPU()
    assert interleaved(unsynced.run(3.0), unsynced.run(1.5), clock=unsynced) == (0.0, 0.0)


def test_the_sync_loop_claim_rejects_a_loop_that_is_slower_and_keeps_a_stated_noise_margin():
    bound = _bound(PROFILE, "slow_epoch's time over fast_epoch's", "at_least")
    source = ck.code_cell(PROFILE, "slow_epoch's time over fast_epoch's")
    assert 0.9 < bound < 1.0 and "3%" in source  # a margin, with its reason
    interleaved = _interleaved()
    clock = DriftingClock(drift=1.02)
    slow, fast = interleaved(clock.run(1.0), clock.run(1.08), rounds=9, clock=clock)
    assert slow / fast < bound  # a "fast" loop 8% slower fails the check, drift or not
    slow, fast = interleaved(clock.run(1.0), clock.run(1.0), rounds=9, clock=clock)
    assert slow / fast >= bound  # equal loops on a drifting clock pass


def test_the_sync_counts_read_the_rows_of_one_kind_per_device():
    source = ck.code_cell(PROFILE, "SYNCS = ")
    for device, expected in [("cuda", {"cudaStreamSynchronize"}),
                             ("cpu", {"aten::_local_scalar_dense"})]:  # fmt: skip
        namespace = {"device": type("Device", (), {"type": device})()}
        exec(source.split("\n\n\ndef ")[0], namespace)
        assert set(namespace["SYNCS"]) == expected


@pytest.mark.parametrize("lesson", [PROFILE, "09_make_it_fast"])
def test_every_profiler_in_lessons_08_and_09_keeps_its_events_so_colab_prints_no_warning(lesson):
    sources = [c.source for c in ck.read(ck.solution_path(lesson)).cells if c.cell_type == "code"]
    calls = [s for s in sources if re.search(r"\bprofile\(activities", s)]
    assert calls and all("acc_events=True" in s for s in calls)


COLAB = ck.ROOT / ".venv-colab" / "bin" / "python"


@pytest.mark.skipif(not COLAB.exists(), reason=".venv-colab is not built (make test builds it)")
def test_on_colabs_pytorch_acc_events_silences_the_cycle_warning_and_keeps_the_events():
    script = """
import warnings, torch
from torch.profiler import ProfilerActivity, profile
for acc in (False, True):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with profile(activities=[ProfilerActivity.CPU], acc_events=acc) as prof:
            torch.ones(3).sum().item()
    names = {row.key for row in prof.key_averages()}
    print(acc, any("clears events" in str(w.message) for w in caught), "aten::item" in names)
"""
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    out = subprocess.run(
        [str(COLAB), "-c", script], capture_output=True, text=True, env=env, timeout=300
    )
    lines = [line for line in out.stdout.splitlines() if line.startswith(("False", "True"))]
    assert lines == ["False True True", "True False True"], out.stdout + out.stderr


def _watcher() -> str:
    """The batch watcher lesson 06's Exercise 3 test writes, as the text of its script."""
    tree = ast.parse(ck.code_cell(DDP, 'watcher = workdir / "watch_batches.py"'))
    texts = [
        node.args[0].value
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        and getattr(node.func, "attr", "") == "write_text"
        and isinstance(node.args[0], ast.Constant)
    ]
    assert len(texts) == 1
    return texts[0]


IDIOMS = {
    "to-device": (
        "x.to(device)\nx.to(device=device, non_blocking=True)\nx[0].to(device)",
        (2, ["cpu"]),
    ),
    "to-local-rank": (
        "try:\n    x.to(0)  # the DDP tutorial's .to(local_rank)\nexcept Exception:\n    pass",
        (1, ["cuda:0"]),
    ),
    "cuda": ("try:\n    x.cuda(1)\nexcept Exception:\n    pass", (1, ["cuda:1"])),
    "cuda-no-index": ("try:\n    x.to('cuda')\nexcept Exception:\n    pass", (1, ["cuda:0"])),
    "ddp-own-copy": (
        "exec(compile('x.to(device)', os.path.join(TORCH, 'distributed', 'utils.py'), 'exec'))",
        (0, []),
    ),
}
# One Python imports torch once and runs the watcher on each script in turn, as `python watch.py
# train.py` would, with torch's own methods back in place before each
WATCH_EACH = """
import runpy, sys, torch
to, cuda = torch.Tensor.to, torch.Tensor.cuda
watcher, *scripts = sys.argv[1:]
for script in scripts:
    torch.Tensor.to, torch.Tensor.cuda = to, cuda
    sys.argv = [watcher, script]
    runpy.run_path(watcher, run_name="__main__")
"""


def test_the_ddp_watcher_records_the_scripts_own_copies_whatever_the_idiom(tmp_path):
    watcher = tmp_path / "watch.py"
    watcher.write_text(_watcher())
    scripts = []
    for name, (body, _) in IDIOMS.items():
        scripts.append(tmp_path / f"{name}.py")
        scripts[-1].write_text(
            "import os\nimport torch\nTORCH = os.path.dirname(torch.__file__)\n"
            'device = torch.device("cpu")\nx = torch.zeros(2, 1, 4, 4)\n' + body + "\n"
        )
    env = {**os.environ, "OMP_NUM_THREADS": "1", "CUDA_VISIBLE_DEVICES": ""}
    out = subprocess.run(
        [sys.executable, "-c", WATCH_EACH, str(watcher), *map(str, scripts)],
        capture_output=True,
        text=True,
        env=env,
    )
    lines = [x for x in out.stdout.splitlines() if x.startswith("image batches copied:")]
    assert len(lines) == len(IDIOMS), out.stdout + out.stderr
    for (name, (_, expected)), line in zip(IDIOMS.items(), lines, strict=True):
        copies = json.loads(line.split(":", 1)[1])
        assert (copies["count"], copies["to"]) == expected, f"{name}: {copies}"


def test_the_checkpointing_time_claim_fails_when_nothing_is_recomputed():
    low = _bound(OOM, "checkpointed step time over the full batch's", "at_least")
    high = _bound(OOM, "checkpointed step time over the full batch's", "at_most")
    forward, backward = 1.0, 2.0  # a block's backward costs about twice its forward
    recompute_half = (forward + backward + forward / 2) / (forward + backward)  # 7/6
    assert low <= recompute_half <= high
    assert 1.0 < low  # checkpointing that recomputes nothing fails the check


def test_the_oom_claims_name_the_allocators_own_count_and_a_tight_recovery_bound():
    assert _bound(OOM, "out-of-memory errors under the cap", "at_least") == 1
    assert "num_ooms" in ck.code_cell(OOM, "out-of-memory errors under the cap")
    assert _bound(OOM, "allocated memory after recovery, over before the OOM", "at_most") <= 1.001


@pytest.mark.parametrize(
    "text, word, limit",
    [("CUDA's allocated memory after forward", "at_most", 1.01)],
)
def test_the_activation_claim_is_tight_enough_to_see_a_surprise(text, word, limit):
    assert _bound(OOM, text, word) <= limit


def test_every_gpu_check_of_05_to_08_sits_in_a_collapsed_tagged_cell_with_a_literal_text():
    for lesson in ["05_dali_pipelines", DDP, OOM, PROFILE]:
        for cell in ck.read(ck.solution_path(lesson)).cells:
            if cell.cell_type != "code" or not re.search(r"claims\.(claim|needs)\(", cell.source):
                continue
            assert "gpu-check" in cell.metadata.get("tags", []), cell.source[:80]
            for call in re.finditer(r"claims\.(claim|needs)\(\s*(\S)", cell.source):
                assert call.group(2) == '"', f"{lesson}: a claim's text is a literal: {cell.source}"


def test_lesson_08s_referee_cells_are_read_only():
    locked = ck.locked_ids(PROFILE)
    assert {"slow_epoch", "profile_epoch", "slow_profile", "scaled_logits"} <= locked


def _ycbcr_round_trip(rgb, upsample):
    """What a JPEG decoder gives when it rebuilds 4:2:0 chroma with ``upsample`` (PIL's YCbCr)."""
    from PIL import Image

    ycc = np.asarray(Image.fromarray(rgb).convert("YCbCr"), dtype=np.float64)
    h, w = ycc.shape[:2]
    chroma = ycc[:, :, 1:].reshape(h // 2, 2, w // 2, 2, 2).mean(axis=(1, 3))  # what JPEG stores
    ycc[:, :, 1:] = upsample(chroma)
    out = np.clip(np.rint(ycc), 0, 255).astype(np.uint8)
    return np.asarray(Image.fromarray(out, "YCbCr").convert("RGB"), dtype=np.float64) / 255


def _nearest(chroma):
    return chroma.repeat(2, axis=0).repeat(2, axis=1)


def _fancy(chroma):
    """libjpeg's h2v2 'fancy' upsampling: each output 3/4 its own sample, 1/4 the next one out."""

    def along(a, axis):
        before = np.concatenate([a.take([0], axis), a.take(range(a.shape[axis] - 1), axis)], axis)
        after = np.concatenate([a.take(range(1, a.shape[axis]), axis), a.take([-1], axis)], axis)
        out = np.stack([0.75 * a + 0.25 * before, 0.75 * a + 0.25 * after], axis + 1)
        return out.reshape(*a.shape[:axis], 2 * a.shape[axis], *a.shape[axis + 1 :])

    return along(along(chroma, 0), 1)


def test_the_fancy_upsampling_bound_rejects_a_decoder_that_repeats_the_colour_planes():
    """DALI's mixed decoder against its CPU decoder, decoding only, at the GPU's source size."""
    from gpucourse import make_shapes

    bound = _bound("05_dali_pipelines", "jpeg_fancy_upsampling: mixed decodes as cpu", "at_most")
    images, _ = make_shapes(8, image_size=256, seed=0)
    gaps = [
        np.abs(_ycbcr_round_trip(rgb, _nearest) - _ycbcr_round_trip(rgb, _fancy)).mean()
        for rgb in images
    ]
    assert float(np.mean(gaps)) > 1.5 * bound  # without fancy upsampling: far outside the bound
    rounding = 1.0 / 255  # an IDCT that rounds differently moves some values by one grey level
    assert rounding / 2 < bound  # half the pixels off by one still passes
