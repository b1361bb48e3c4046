"""gpucourse.loaders: the JPEG dataset, worker counts, the overlapped wait-vs-step measurement,
spawn safety."""

import os
import subprocess
import sys
import textwrap
from types import SimpleNamespace

import coursekit as ck
import pytest
import torch

import gpucourse
from gpucourse import loaders
from gpucourse.data import CLASSES


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    return gpucourse.write_image_folder(
        tmp_path_factory.mktemp("jpeg") / "shapes", n_per_class=3, image_size=16
    )


def test_image_files_match_image_folder(root):
    paths, labels, classes = loaders.image_files(root)
    dataset = loaders.jpeg_dataset(root)
    assert classes == sorted(CLASSES) == dataset.classes
    assert [(p, label) for p, label in zip(paths, labels, strict=True)] == [
        (p, label) for p, label in dataset.samples
    ]
    assert len(paths) == 12 and sorted(set(labels)) == [0, 1, 2, 3]


def test_dataset_items_are_float_images_in_unit_range(root):
    image, label = loaders.jpeg_dataset(root)[5]
    assert image.shape == (3, 16, 16) and image.dtype == torch.float32 and isinstance(label, int)
    assert 0 <= float(image.min()) and float(image.max()) <= 1 and float(image.max()) > 0.2
    resized, _ = loaders.jpeg_dataset(root, image_size=24)[5]
    assert resized.shape == (3, 24, 24)


def test_a_wrong_root_is_explained(tmp_path):
    with pytest.raises(FileNotFoundError, match="write_image_folder"):
        loaders.jpeg_dataset(tmp_path / "nowhere")
    with pytest.raises(FileNotFoundError, match="class folder"):
        loaders.image_files(tmp_path)


@pytest.mark.parametrize(
    "cpu_max, cores",
    [
        ("max 100000\n", "all"),
        ("50000 100000\n", 1),
        ("100000 100000\n", 1),
        ("150000 100000\n", 2),
        (None, "all"),
    ],
)
def test_available_cores_keeps_to_a_containers_cpu_quota(tmp_path, cpu_max, cores):
    path = tmp_path / "cpu.max"
    if cpu_max is not None:  # None: no cgroup v2 file (macOS, Windows, cgroup v1)
        path.write_text(cpu_max)
    mask = len(os.sched_getaffinity(0))
    assert loaders.available_cores(str(path)) == (mask if cores == "all" else min(mask, cores))


def test_num_workers_caps_at_the_cores_with_a_message(monkeypatch, capsys):
    monkeypatch.setattr(loaders, "available_cores", lambda: 4)
    assert loaders.num_workers() == 3, "by default one core stays with the training loop"
    assert loaders.num_workers(2) == 2 and loaders.num_workers(0) == 0
    assert capsys.readouterr().out == ""
    assert loaders.num_workers(64) == 4
    assert "64 DataLoader workers" in capsys.readouterr().out
    monkeypatch.setattr(loaders, "available_cores", lambda: 1)
    assert loaders.num_workers() == 0, "a single core: load in the main process"
    for bad in (-1, 1.5, True, "2"):
        with pytest.raises(ValueError, match="num_workers"):
            loaders.num_workers(bad)


class FakeClock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


def test_measure_splits_waiting_from_the_rest_and_synchronizes_only_at_the_ends(monkeypatch):
    clock, events = FakeClock(), []
    monkeypatch.setattr(loaders.time, "perf_counter", clock)

    def fake_gpu_sync():  # the GPU still had 2 s of queued work whenever the loop synchronizes
        events.append("sync")
        clock.now += 2.0

    monkeypatch.setattr(loaders, "_synchronizer", lambda device: fake_gpu_sync)

    def slow_batches():
        for _ in range(6):
            clock.now += 3.0  # the loader takes 3 s per batch
            yield torch.zeros(5, 2), torch.zeros(5)

    def step(batch):
        events.append("step")
        clock.now += 1.0  # launching the step takes 1 s on the host

    stats = loaders.measure(slow_batches(), step, device="cuda", label="slow")
    assert events == ["step", "sync"] + ["step"] * 5 + ["sync"], (
        "no synchronize between steps: loading overlaps compute"
    )
    assert (stats.batches, stats.samples) == (5, 25), "the warm-up batch is not counted"
    assert clock.now - stats.total_s == 6.0, (
        "warm-up, not counted: 3 s loading, 1 s step, 2 s of GPU work finished"
    )
    assert stats.wait_s == 15.0 and stats.total_s == 22.0, "the last GPU work counts"
    assert stats.samples_per_s == 25 / 22 and stats.label == "slow"


def test_measure_synchronizes_only_a_cuda_device(monkeypatch):
    synced = []
    monkeypatch.setattr(torch.cuda, "synchronize", synced.append)
    for device in ("cpu", None, torch.device("cpu"), "cuda:1", torch.device("cuda")):
        loaders._synchronizer(device)()
    assert synced == ["cuda:1", torch.device("cuda")]


def test_measure_counts_samples_in_nested_batches():
    batches = [{"image": torch.zeros(4, 3), "label": torch.zeros(4)}] * 3
    assert loaders.measure(batches, lambda b: None, warmup=0).samples == 12
    assert loaders.measure([[(torch.zeros(2, 1),)]] * 3, lambda b: None).samples == 4


def test_measure_explains_empty_and_bad_input():
    with pytest.raises(ValueError, match="no batch left to measure after 1 warm-up"):
        loaders.measure([], lambda b: None)
    with pytest.raises(ValueError, match="no batch left to measure after 1 warm-up"):
        loaders.measure([torch.zeros(1, 1)], lambda b: None)
    with pytest.raises(TypeError, match="batch size"):
        loaders.measure(["text", "more"], lambda b: None, warmup=0)


def test_epochs_repeats_the_loader():
    loader = torch.utils.data.DataLoader(list(range(6)), batch_size=4)
    assert [len(b) for b in loaders.epochs(loader, 3)] == [4, 2] * 3


def test_lesson_03_plots_the_split_it_measured():
    """Lesson 03's own `plot_split` cell: per batch, the step's bar, then the wait stacked after
    it, and the stamp."""
    import matplotlib

    matplotlib.use("Agg")
    cell = next(
        c
        for c in ck.read(ck.solution_path("03_batching_pipelines")).cells
        if "def plot_split(" in c.source
    )
    lesson = {"gpucourse": gpucourse, "facts": SimpleNamespace(name="a test CPU")}
    exec(cell.source, lesson)
    stats = [
        loaders.LoaderStats("a", 2, 8, wait_s=1e-3, total_s=4e-3),
        loaders.LoaderStats("b", 4, 16, 0.0, 2e-3),
    ]
    ax = lesson["plot_split"](stats)
    step, wait = ax.containers
    assert [bar.get_width() for bar in step] == pytest.approx([1.5, 0.5]), (
        "milliseconds per batch of the step"
    )
    assert [bar.get_width() for bar in wait] == pytest.approx([0.5, 0.0]) and wait[
        0
    ].get_x() == pytest.approx(1.5)
    assert "measured on a test CPU" in [text.get_text() for text in ax.texts], (
        "stamped with the device"
    )
    matplotlib.pyplot.close("all")


def test_lesson_03_rows_hand_the_step_one_layout(root):
    """Lesson 03 compares loaders with one training step, so every row's batches must share one
    memory layout, contiguous channels-first as `default_collate` stacks them: the decoded shapes,
    the DataLoader's batches, and tf.data's channels-last batches through the lesson's own
    `from_tf`."""
    import numpy as np

    cell = next(
        c
        for c in ck.read(ck.solution_path("03_batching_pipelines")).cells
        if c.source.startswith("def from_tf(")
    )
    lesson = {"torch": torch}
    exec(cell.source, lesson)
    tf_batch = (
        SimpleNamespace(numpy=lambda: np.random.rand(4, 16, 16, 3).astype(np.float32)),
        SimpleNamespace(numpy=lambda: np.arange(4, dtype=np.int32)),
    )
    from_tf_images, from_tf_labels = lesson["from_tf"](tf_batch)
    loader_images, _ = next(
        iter(torch.utils.data.DataLoader(loaders.jpeg_dataset(root), batch_size=4))
    )
    decoded_images, _ = gpucourse.shapes_dataset(4, image_size=16)[:]
    for row, images in {
        "DataLoader": loader_images,
        "decoded": decoded_images,
        "from_tf": from_tf_images,
    }.items():
        assert images.shape == (4, 3, 16, 16) and images.stride() == (
            3 * 16 * 16,
            16 * 16,
            16,
            1,
        ), f"{row}: {images.stride()}"
    assert from_tf_labels.dtype == torch.int64


SPAWNED = """
import torch
from gpucourse import loaders

dataset = loaders.jpeg_dataset({root!r})
loader = torch.utils.data.DataLoader(
    dataset, batch_size=4, num_workers=1, multiprocessing_context="spawn", timeout=60
)
seen = sum(len(labels) for _, labels in loader)
print("seen", seen)
"""


@pytest.mark.slow  # two fresh Pythons import torch: seconds each on 2 busy cores
def test_spawned_workers_finish_and_do_not_hang(root):
    """Workers started with spawn (as on macOS, Windows, Python >= 3.14) get the dataset by
    pickling: one such worker proves it (each more is one more Python importing torch).

    The code runs in `python -c`, like a notebook: no `if __name__ == "__main__"`
    guard and no main file. It must finish, not hang, well within the timeout.
    """
    code = textwrap.dedent(SPAWNED.format(root=str(root)))
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=240
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert "seen 12" in result.stdout


def test_augmented_jpeg_dataset_rotates_and_flips_like_lesson_05(root):
    plain = loaders.jpeg_dataset(root, image_size=8)[4][0]
    torch.manual_seed(0)
    augmented = torch.stack(
        [loaders.jpeg_dataset(root, image_size=8, augment=True)[4][0] for _ in range(8)]
    )
    assert augmented.shape == (8, 3, 8, 8) and augmented.dtype == torch.float32
    assert (
        0 <= augmented.min()
        and augmented.max() <= 1
        and not all(torch.equal(a, plain) for a in augmented)
    )
