"""gpucourse.data: deterministic, balanced, cached, and learnable."""

import json

import numpy as np
import pytest
import torch

import gpucourse
from gpucourse.data import CLASSES


def test_deterministic_and_balanced():
    images, labels = gpucourse.make_shapes(40, image_size=16, seed=1)
    again, labels_again = gpucourse.make_shapes(40, image_size=16, seed=1)
    assert images.shape == (40, 16, 16, 3) and images.dtype == np.uint8
    assert np.array_equal(images, again) and np.array_equal(labels, labels_again)
    assert np.bincount(labels, minlength=len(CLASSES)).tolist() == [10] * 4
    other, _ = gpucourse.make_shapes(40, image_size=16, seed=2)
    assert not np.array_equal(images, other)


def test_bad_sizes_are_explained():
    with pytest.raises(ValueError, match="n >= 1"):
        gpucourse.make_shapes(0)


def test_dataset_is_float_in_unit_range():
    x, y = gpucourse.shapes_dataset(8, image_size=16)[:]
    assert x.shape == (8, 3, 16, 16) and x.dtype == torch.float32 and y.dtype == torch.int64
    assert 0 <= float(x.min()) and float(x.max()) <= 1


def test_dataset_has_the_layout_of_a_dataloader_batch():
    """Contiguous channels-first, as `default_collate` stacks a batch: a channels-last tensor (what
    permute alone gives) would run the model's convolutions in another memory layout, and lesson 03
    would compare layouts, not loaders."""
    x, y = gpucourse.shapes_dataset(8, image_size=16)[:]
    stacked, _ = torch.utils.data.default_collate([(x[i].clone(), y[i]) for i in range(8)])
    assert x.is_contiguous() and not x.is_contiguous(memory_format=torch.channels_last)
    assert x.stride() == stacked.stride() == (3 * 16 * 16, 16 * 16, 16, 1)


def test_image_folder_is_written_once_and_reused(tmp_path):
    root = gpucourse.write_image_folder(tmp_path / "shapes", n_per_class=3, image_size=16)
    files = sorted(root.rglob("*.jpg"))
    assert len(files) == 12 and {f.parent.name for f in files} == set(CLASSES)
    stamp = files[0].stat().st_mtime_ns
    assert gpucourse.write_image_folder(root, n_per_class=3, image_size=16) == root
    assert files[0].stat().st_mtime_ns == stamp, (
        "a second call with the same parameters reuses the files"
    )
    assert json.loads((root / "manifest.json").read_text())["n_per_class"] == 3


def test_changed_parameters_rebuild_the_tree(tmp_path):
    root = gpucourse.write_image_folder(tmp_path / "shapes", n_per_class=2, image_size=16)
    gpucourse.write_image_folder(root, n_per_class=3, image_size=16)
    assert len(list(root.rglob("*.jpg"))) == 12


def test_jpegs_decode_to_the_labelled_shapes(tmp_path):
    from torchvision.datasets import ImageFolder

    root = gpucourse.write_image_folder(tmp_path / "shapes", n_per_class=2, image_size=32)
    folder = ImageFolder(root)
    assert folder.classes == sorted(CLASSES)
    image, label = folder[0]
    assert image.size == (32, 32)


def test_default_location_honours_the_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("GPUCOURSE_DATA", str(tmp_path))
    root = gpucourse.write_image_folder(n_per_class=1, image_size=16)
    assert root.parent == tmp_path
