"""The logic behind lessons 05-08's GPU checks, pinned on a CPU with fakes.

Each test reads the code it checks from the solution notebook (the lesson is the source), runs it
against fake clocks, fake GPUs or small scripts, and shows that it tells the right path from the
broken one the claim names.
"""

from __future__ import annotations

import ast
import importlib.util
import json
import os
import re
import statistics
import subprocess
import sys
import time
import types

import coursekit as ck
import numpy as np
import pytest

DALI = "05_dali_pipelines"
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


def test_interleaved_timing_sees_a_2x_gap_through_a_drift_that_hides_it_from_sequential_timing():
    interleaved = _interleaved()
    clock = ck.DriftingClock(drift=1.1)
    slow, fast = interleaved(clock.run(2.0), clock.run(1.0), rounds=7, clock=clock)
    assert 1.7 < slow / fast < 2.0  # each pair of runs sees the same clocks

    sequential = ck.DriftingClock(
        drift=1.1
    )  # what timing all slow runs, then all fast ones, reports
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


@pytest.fixture
def gpu_check(run_cell):
    """Run a lesson's `gpu-check` cell on a faked ``cuda:0`` with the given names; its record."""
    import gpucourse

    def run(lesson: str, title: str, **names) -> dict:
        namespace = {"gpucourse": gpucourse, "device": "cuda:0", "np": np, **names}
        (entry,) = run_cell(ck.gpu_check(lesson, title), namespace)
        return entry

    return run


FANCY_CHECK = "with jpeg_fancy_upsampling, nvJPEG decodes"


def _decode_gaps(decodes, wrong_pixels: float, honoured: int) -> dict[bool, np.ndarray]:
    """Per image, mean |GPU decode - CPU decode| without and with the flag, as the lesson measures
    it: the CPU decoder is libjpeg-turbo's fancy upsampling; the GPU's inverse DCT rounds a share
    ``wrong_pixels`` of the values one grey level off; the flag works on the first ``honoured``
    images (the rest, as if a decoder ignored it, repeat the colour planes either way).
    ``decodes``: per image, its colour planes rebuilt by interpolation (the CPU's) and by
    repetition."""
    rng = np.random.default_rng(1)
    gaps = {False: [], True: []}
    for i, (cpu, repeated) in enumerate(decodes):
        rounding = (rng.random(cpu.shape) < wrong_pixels) * rng.choice([-1, 1], cpu.shape) / 255
        plain = repeated + rounding
        fancy = cpu + rounding if i < honoured else plain
        gaps[False].append(np.abs(plain - cpu).mean())
        gaps[True].append(np.abs(fancy - cpu).mean())
    return {flag: np.array(values) for flag, values in gaps.items()}


def test_the_fancy_upsampling_check_fails_exactly_when_a_decoder_ignores_the_flag(gpu_check):
    """The lesson's GPU check on modelled decodes of the GPU's eight 256 px files. DALI's own test
    of the flag holds the mixed decoder to a mean error of one grey level against the CPU's
    (`test_fancy_upsampling`, `compare_pipelines(..., eps=1)`; without the flag its decoders'
    consistency test allows 4): a GPU whose rounding is that far off on every value still passes.
    An ignored flag decodes the same pixels twice (a ratio of 1), on all images or on the ones a
    hardware decoder takes (5 of 8 on an A100 or H100), and so does a decode left on the CPU."""
    from gpucourse import make_shapes

    images, _ = make_shapes(8, image_size=256, seed=0)
    decodes = [(_ycbcr_round_trip(x, _fancy), _ycbcr_round_trip(x, _nearest)) for x in images]
    bound = _bound(DALI, "jpeg_fancy_upsampling: worst image's gap", "at_most")
    names = {"dali": object(), "decoder": "mixed"}
    for wrong_pixels in (0.0, 0.5, 1.0):  # 1.0: every value one grey level off, DALI's limit
        gaps = _decode_gaps(decodes, wrong_pixels, honoured=8)
        entry = gpu_check(DALI, FANCY_CHECK, decode_gaps=gaps, **names)
        assert entry["passed"] and entry["measured"] < 0.75 * bound, (wrong_pixels, entry)
    for honoured in (0, 5):  # ignored everywhere, or by the decoder that took 3 of the 8 images
        gaps = _decode_gaps(decodes, 0.5, honoured=honoured)
        entry = gpu_check(DALI, FANCY_CHECK, decode_gaps=gaps, **names)
        assert (entry["passed"], entry["measured"]) == (False, 1.0), (honoured, entry)
    on_cpu = {flag: np.zeros(8) for flag in (False, True)}  # "mixed" that decoded on the CPU
    assert gpu_check(DALI, FANCY_CHECK, decode_gaps=on_cpu, **names)["passed"] is False
    for missing in ({"dali": None, "decoder": "mixed"}, {"dali": object(), "decoder": "cpu"}):
        entry = gpu_check(DALI, FANCY_CHECK, **missing)  # no DALI, or no GPU decode: not run
        assert (entry["passed"], entry["measured"], entry["checked"]) == (None, None, False)


OFFLOAD_CHECK = "the mixed pipeline takes the work off DALI's CPU threads"
LOADER, DALI_CPU, DALI_GPU = (
    "PIL + torchvision DataLoader",
    "DALI, CPU pipeline",
    "DALI, GPU pipeline (mixed)",
)


def test_the_offload_bound_sits_between_work_left_on_the_cpu_and_what_mixed_leaves_there():
    """Per image on one CPU thread at the GPU sizes (4096 JPEGs of 256 px -> 128 px, rotated,
    mirrored, normalized), measured with DALI 2.4 on a CI core: DALI's CPU pipeline 1.6 to 1.9 ms,
    reading the file 0.016 ms, decoding 0.36 to 0.44 ms; PIL decodes a file in 0.56 ms, and in
    0.33 ms at 1/8 scale (draft mode: all the Huffman decoding, 1/64 of the rest). `mixed` leaves
    DALI's threads the reads and, without a hardware decoder, the Huffman decoding: about 7x less
    host work. Where the host is the limit the ratio is near that; the bound leaves room for a
    GPU pipeline that saturates the GPU at high thread counts, and rejects a pipeline whose work
    stayed on the CPU (about 1, noise of a single timing included)."""
    bound = _bound(DALI, "DALI's GPU pipeline's best images/s over its CPU", "at_least")
    cpu_ms, read_ms, decode_ms, huffman_share = 1.6, 0.016, 0.44, 0.33 / 0.56
    host_bound = cpu_ms / (read_ms + huffman_share * decode_ms)
    assert host_bound > 3 * bound
    stayed_on_cpu = 1.0 * 1.2  # the same work on the same threads, and 20% timing noise
    assert stayed_on_cpu < bound


def test_the_offload_check_compares_dalis_own_pipelines_at_the_same_threads(gpu_check):
    """The old check (the GPU pipeline's best over the DataLoader's) passed a GPU pipeline that
    never used the GPU: DALI's CPU threads alone beat the DataLoader (no Python per image)."""
    # images/s at 1, 2, 4 and 8 workers or threads
    loader = [400.0, 780.0, 1500.0, 2700.0]
    cpu = [600.0, 1150.0, 2200.0, 3900.0]
    right = {LOADER: loader, DALI_CPU: cpu, DALI_GPU: [3500.0, 6400.0, 9800.0, 9600.0]}
    entry = gpu_check(DALI, OFFLOAD_CHECK, rates=right, dali=object())
    assert entry["passed"] and entry["measured"] == pytest.approx(9800 / 2200)  # at 4 threads
    stayed = {**right, DALI_GPU: [620.0, 1180.0, 2150.0, 4000.0]}  # mixed fell back to the CPU
    assert max(stayed[DALI_GPU]) / max(loader) > 1.0  # what the old check accepted
    entry = gpu_check(DALI, OFFLOAD_CHECK, rates=stayed, dali=object())
    assert entry["passed"] is False and entry["measured"] == pytest.approx(4000 / 3900)
    for rates, dali in [({LOADER: loader, DALI_CPU: cpu}, object()), ({LOADER: loader}, None)]:
        entry = gpu_check(DALI, OFFLOAD_CHECK, rates=rates, dali=dali)  # no GPU, or no DALI
        assert (entry["passed"], entry["measured"], entry["checked"]) == (None, None, False)


def _xplane_pb2():
    """TensorFlow's trace schema, loaded from its file without importing TensorFlow (4 s)."""
    name = "tensorflow.tsl.profiler.protobuf.xplane_pb2"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.find_spec("tensorflow")
    if spec is None:
        pytest.skip("TensorFlow is not installed")
    path = os.path.join(spec.submodule_search_locations[0], *name.split(".")[1:]) + ".py"
    loaded = importlib.util.spec_from_file_location("xplane_pb2_for_tests", path)
    module = importlib.util.module_from_spec(loaded)
    loaded.loader.exec_module(module)
    return module


def _trace(xplane, folder, name: str, planes: dict[str, int], errors=()) -> str:
    """An .xplane.pb holding one line of ``planes[name]`` events per plane, and ``errors``."""
    space = xplane.XSpace(errors=list(errors), hostnames=["vm"])
    for plane_name, events in planes.items():
        line = space.planes.add(name=plane_name).lines.add(name="Stream 7")
        for i in range(events):
            line.events.add(metadata_id=1, offset_ps=1000 * i, duration_ps=500)
    path = folder / f"{name}.xplane.pb"
    path.write_bytes(space.SerializeToString())
    return str(path)


def test_the_tensorflow_profile_validates_the_gpu_exactly_when_its_trace_holds_gpu_events(
    gpu_check, monkeypatch, tmp_path
):
    """Lesson 08 reads the trace its TensorFlow script wrote in a process of its own: GPU events
    meet the need; a trace of the host alone, a GPU plane CUPTI left empty, or no trace at all
    leave it unmet, with the reason the trace or the script's stderr gives."""
    xplane = _xplane_pb2()
    package = types.ModuleType("tensorflow.tsl.profiler.protobuf")
    package.xplane_pb2 = xplane
    monkeypatch.setitem(sys.modules, "tensorflow.tsl.profiler.protobuf", package)
    namespace = {"Path": __import__("pathlib").Path, "tf": package}
    exec(ck.code_cell(PROFILE, "def gpu_events("), namespace)
    gpu_events = namespace["gpu_events"]

    host = {"/host:CPU": 40, "Task Environment": 0}
    cupti = "E0000 cupti_error_manager.cc:194] cuptiSubscribe: CUPTI_ERROR_MULTIPLE_SUBSCRIBERS"
    cases = {
        "gpu": (_trace(xplane, tmp_path, "gpu", {**host, "/device:GPU:0": 12}), "", True, ""),
        "host only": (_trace(xplane, tmp_path, "host", host), "", False, "0 GPU plane(s)"),
        "refused": (
            _trace(xplane, tmp_path, "refused", host),
            f"I0000 start\n{cupti}\n",
            False,
            "CUPTI_ERROR_MULTIPLE_SUBSCRIBERS",
        ),  # fmt: skip
        "empty GPU plane": (
            _trace(xplane, tmp_path, "empty", {**host, "/device:GPU:0": 0}, ["CUPTI: no events"]),
            "",
            False,
            "CUPTI: no events",
        ),  # fmt: skip
        "no trace": (None, "", False, "no trace"),
    }
    for case, (trace, log, met, why) in cases.items():
        tf_events, tf_why = gpu_events(trace, log)
        entry = gpu_check(PROFILE, "TensorFlow's profiler records the GPU",
                          tf_events=tf_events, tf_why=tf_why)  # fmt: skip
        assert entry["kind"] == "precondition" and entry["met"] is met, (case, entry)
        assert met or why in entry["why"], (case, entry)
