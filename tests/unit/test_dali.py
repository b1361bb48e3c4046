"""What lesson 05 teaches about DALI, pinned against the installed DALI on the CPU.

Tests that need DALI skip cleanly where it is not installed (Binder, macOS).
"""

from types import SimpleNamespace

import coursekit as ck
import numpy as np
import pytest
import torch

import gpucourse
from gpucourse import loaders


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    return gpucourse.write_image_folder(
        tmp_path_factory.mktemp("jpeg") / "shapes", n_per_class=5, image_size=16
    )


def _epochs(files, n, **reader):
    """Three epochs of file indices from a PARTIAL, auto-resetting iterator (batch size 8: the
    last batch is short)."""
    pytest.importorskip("nvidia.dali")
    from nvidia.dali import fn, pipeline_def
    from nvidia.dali.plugin.pytorch import DALIGenericIterator, LastBatchPolicy

    @pipeline_def(batch_size=8, num_threads=1, device_id=None, seed=0)
    def indices():
        # no labels: file i is labelled i
        _, index = fn.readers.file(files=files, name="Reader", **reader)
        return index

    loader = DALIGenericIterator(
        [indices()],
        ["index"],
        reader_name="Reader",
        last_batch_policy=LastBatchPolicy.PARTIAL,
        auto_reset=True,
    )
    return [[i for batch in loader for i in batch[0]["index"].ravel().tolist()] for _ in range(n)]


@pytest.mark.parametrize("shuffle", ["random_shuffle", "shuffle_after_epoch"])
def test_only_a_padded_reader_gives_exact_epochs_after_the_first(root, shuffle):
    files = loaders.image_files(root)[0]  # 20 files: batches of 8, 8, 4
    every_file = list(range(len(files)))
    unpadded = _epochs(files, 3, **{shuffle: True})
    assert sorted(unpadded[0]) == every_file
    assert sorted(unpadded[1]) != every_file and len(unpadded[1]) == len(files), (
        "the lesson's measurement: files lost"
    )
    padded = _epochs(files, 3, pad_last_batch=True, **{shuffle: True})
    assert all(sorted(epoch) == every_file for epoch in padded) and padded[0] != padded[1]


def test_random_shuffle_reads_one_fixed_order_whatever_the_seed(root):
    pytest.importorskip("nvidia.dali")
    from nvidia.dali import fn, pipeline_def

    files = loaders.image_files(root)[0]

    @pipeline_def(batch_size=len(files), num_threads=1, device_id=None)
    def order():
        # a buffer of one: no local mixing
        return fn.readers.file(files=files, random_shuffle=True, initial_fill=1)[1]

    orders = [order(seed=seed).run()[0].as_array().ravel().tolist() for seed in (0, 1)]
    assert orders[0] == orders[1] and orders[0] != list(range(len(files)))


def test_dali_cpu_decoding_matches_pil_and_image_folder_labels(root):
    pytest.importorskip("nvidia.dali")
    from nvidia.dali import fn, pipeline_def, types

    paths, labels, _ = loaders.image_files(root)

    @pipeline_def(batch_size=len(paths), num_threads=1, device_id=None, seed=0)
    def plain():
        jpegs, labels = fn.readers.file(file_root=str(root), name="Reader")
        images = fn.decoders.image(
            jpegs, device="cpu", output_type=types.RGB, jpeg_fancy_upsampling=True
        )
        return fn.crop_mirror_normalize(
            images, dtype=types.FLOAT, output_layout="CHW", mean=[0.0] * 3, std=[255.0] * 3
        ), labels

    images, got_labels = (out.as_cpu().as_array() for out in plain().run())
    assert got_labels.ravel().tolist() == labels, (
        "DALI numbers the class folders as ImageFolder does"
    )
    reference = torch.stack([loaders.jpeg_dataset(root)[i][0] for i in range(len(paths))]).numpy()
    # both decode with libjpeg-turbo on the CPU
    np.testing.assert_allclose(images, reference, atol=1e-6)


def test_lesson_05_shows_one_row_per_source():
    """Lesson 05's own `show_images` cell: one row of CHW images per source, drawn as HWC,
    stamped with the device."""
    import matplotlib

    matplotlib.use("Agg")
    cell = next(
        c
        for c in ck.read(ck.solution_path("05_dali_pipelines")).cells
        if "def show_images(" in c.source
    )
    lesson = {"gpucourse": gpucourse, "facts": SimpleNamespace(name="a test CPU")}
    exec(cell.source, lesson)
    rows = {"PIL": torch.rand(5, 3, 8, 6).numpy() * 1.2, "DALI": np.zeros((5, 3, 8, 6), np.float32)}
    axes = lesson["show_images"](rows, n=4)
    assert axes.shape == (2, 4) and axes[1][0].get_ylabel() == "DALI"
    assert axes[0][0].get_images()[0].get_array().shape == (8, 6, 3), "CHW drawn as HWC"
    assert axes[0][0].get_images()[0].get_array().max() <= 1.0, "clipped to [0, 1]"
    assert "measured on a test CPU" in [text.get_text() for text in axes[0][-1].texts], (
        "stamped with the device"
    )
    matplotlib.pyplot.close("all")
