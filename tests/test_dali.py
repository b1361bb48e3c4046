"""gpucourse.dali: device translation, the stand-in decorator, the torchvision baseline, DALI's outputs.

Tests that need DALI skip cleanly where it is not installed (Binder, macOS).
"""

import subprocess
import sys

import numpy as np
import pytest
import torch

import gpucourse
from gpucourse import dali, loaders


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    return gpucourse.write_image_folder(tmp_path_factory.mktemp("jpeg") / "shapes", n_per_class=3, image_size=16)


def test_importing_the_module_does_not_import_dali():
    code = "import sys, gpucourse.dali; assert 'nvidia.dali' not in sys.modules and 'torch' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True)


@pytest.mark.parametrize(
    ("device", "want_id", "want_decoder"),
    [("cpu", None, "cpu"), ("meta", None, "cpu"), (torch.device("cpu"), None, "cpu"),
     ("cuda:1", 1, "mixed"), (torch.device("cuda", 2), 2, "mixed")],
)
def test_device_id_and_decoder_follow_the_torch_device(device, want_id, want_decoder):
    assert dali.device_id(device) == want_id
    assert dali.decoder_device(device) == want_decoder


@pytest.mark.parametrize("form", ["bare", "called"])
def test_not_installed_stands_in_for_pipeline_def(form):
    decorator = dali.not_installed if form == "bare" else dali.not_installed(batch_size=8)

    @decorator
    def my_pipeline(root):
        raise AssertionError("the graph must never be built without DALI")

    assert my_pipeline.__name__ == "my_pipeline"
    with pytest.raises(RuntimeError, match="DALI is not installed"):
        my_pipeline("data", batch_size=4, device_id=None)


def test_torchvision_dataset_does_the_pipeline_work(root):
    plain = dali.torchvision_dataset(root, 8, augment=False)
    image, label = plain[4]
    assert image.shape == (3, 8, 8) and image.dtype == torch.float32 and 0 <= image.min() and image.max() <= 1
    assert torch.equal(image, loaders.jpeg_dataset(root, image_size=8)[4][0]) and label == plain.targets[4]
    torch.manual_seed(0)
    augmented = torch.stack([dali.torchvision_dataset(root, 8)[4][0] for _ in range(6)])
    assert augmented.shape == (6, 3, 8, 8) and not all(torch.equal(a, image) for a in augmented)


def test_torchvision_dataset_names_a_missing_tree(tmp_path):
    with pytest.raises(FileNotFoundError, match="write_image_folder"):
        dali.torchvision_dataset(tmp_path / "nothing", 8)


def test_show_draws_one_row_per_source():
    pytest.importorskip("matplotlib")
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = {"chw floats": torch.rand(5, 3, 8, 8), "hwc uint8": np.zeros((5, 8, 8, 3), np.uint8)}
    axes = dali.show(rows, titles=list("abcde"), device="cpu", n=4)
    assert axes.shape == (2, 4) and axes[0][0].get_title() == "a"
    plt.close("all")


def test_tf_plugin_missing_says_so(monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "nvidia.dali.plugin.tf", None)  # as if it were not installed
    assert dali.import_tf_plugin() is None
    assert "TensorFlow plugin is not installed" in capsys.readouterr().out


def _pipeline(root, batch_size):
    pytest.importorskip("nvidia.dali")
    from nvidia.dali import fn, pipeline_def, types

    @pipeline_def(batch_size=batch_size, num_threads=1, device_id=None, seed=0)
    def plain():
        jpegs, labels = fn.readers.file(file_root=str(root), name="Reader")
        images = fn.decoders.image(jpegs, device="cpu", output_type=types.RGB)
        return fn.crop_mirror_normalize(images, dtype=types.FLOAT, output_layout="CHW", mean=[0.0] * 3, std=[255.0] * 3), labels

    return plain()


def test_outputs_match_pil_and_image_folder_labels(root):
    paths, labels, _ = loaders.image_files(root)
    images, got_labels = dali.outputs(_pipeline(root, len(paths)))
    assert images.shape == (len(paths), 3, 16, 16) and images.dtype == np.float32
    assert got_labels.ravel().tolist() == labels, "DALI numbers the class folders as ImageFolder does"
    reference = torch.stack([loaders.jpeg_dataset(root)[i][0] for i in range(len(paths))]).numpy()
    np.testing.assert_allclose(images, reference, atol=1e-6)  # both decode with libjpeg-turbo on the CPU


def test_outputs_takes_a_run_result_too(root):
    pipeline = _pipeline(root, 4)
    images, labels = dali.outputs(pipeline.run())
    assert images.shape == (4, 3, 16, 16) and labels.shape == (4, 1)
