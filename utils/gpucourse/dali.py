"""NVIDIA DALI next to the course's PyTorch loaders: devices, a fair baseline, a look at the images.

DALI is optional and imported only inside these functions, never when this
module is imported. ``device_id`` and ``decoder_device`` translate a
``torch.device`` into DALI's terms (``device_id=None`` with ``device="cpu"``
operators is a CPU-only pipeline; a GPU pipeline decodes with
``device="mixed"``). ``not_installed`` stands in for ``pipeline_def`` where
DALI is missing, so a lesson's cells still define their functions.
``torchvision_dataset`` is the PIL + torchvision counterpart of a DALI
training pipeline (decode, resize, rotate, flip, scale to [0, 1]), kept in a
module so ``DataLoader`` workers can unpickle it. ``outputs`` runs a
pipeline once and hands back NumPy arrays, ``show`` draws rows of images, and
``import_tf_plugin`` imports DALI's TensorFlow plugin or says why not.
"""

from __future__ import annotations

import os

NOT_INSTALLED = (
    "NVIDIA DALI is not installed here (it ships for Linux only), so this DALI exercise cannot run "
    "and scores 0 points. Install the course environment with `make lab` on Linux, or use Colab."
)


def device_id(device) -> int | None:
    """DALI's ``device_id`` for a torch device: the GPU's index, or ``None`` (a CPU-only pipeline)."""
    kind = getattr(device, "type", None) or str(device).split(":")[0]
    if kind != "cuda":
        return None
    if isinstance(device, str):
        index = int(device.split(":")[1]) if ":" in device else None
    else:
        index = device.index
    if index is None:
        import torch

        index = torch.cuda.current_device()
    return index


def decoder_device(device) -> str:
    """``"mixed"`` (the GPU decodes, nvJPEG) for a CUDA device, else ``"cpu"``."""
    return "cpu" if device_id(device) is None else "mixed"


def not_installed(function=None, **_pipeline_args):
    """A stand-in for ``nvidia.dali.pipeline_def`` where DALI is missing: calling the pipeline says so."""

    def wrap(graph):
        def missing(*args, **kwargs):
            raise RuntimeError(NOT_INSTALLED)

        missing.__name__ = missing.__qualname__ = getattr(graph, "__name__", "pipeline")
        return missing

    return wrap(function) if callable(function) else wrap


def outputs(pipeline) -> list:
    """One NumPy array per output (batch first), copied to the host if on the GPU.

    ``pipeline`` is a DALI pipeline (it runs once) or what its ``run()`` returned.
    """
    import numpy as np

    arrays = []
    for batch in pipeline.run() if hasattr(pipeline, "run") else pipeline:
        if hasattr(batch, "as_cpu"):  # a TensorListGPU
            batch = batch.as_cpu()
        arrays.append(np.stack([np.asarray(batch[i]) for i in range(len(batch))]))
    return arrays


def torchvision_dataset(root: str | os.PathLike, image_size: int, *, augment: bool = True, degrees: float = 15.0):
    """The JPEG tree as an ``ImageFolder`` doing a DALI training pipeline's work with PIL + torchvision.

    Decode (PIL), resize to ``image_size`` x ``image_size``, with ``augment``
    rotate by a random angle in [-degrees, degrees] (corners filled black)
    and flip left-right with probability 0.5, then float32 3 x H x W in [0, 1].
    """
    import torch
    from torchvision.datasets import ImageFolder
    from torchvision.transforms import v2

    from .loaders import _classes

    _classes(__import__("pathlib").Path(root))  # a clear message for a wrong root
    steps = [v2.ToImage(), v2.Resize((image_size, image_size), antialias=True)]
    if augment:
        steps += [v2.RandomRotation(degrees, fill=0), v2.RandomHorizontalFlip(0.5)]
    steps.append(v2.ToDtype(torch.float32, scale=True))
    return ImageFolder(str(root), transform=v2.Compose(steps))


def _as_hwc(image):
    import numpy as np

    image = np.asarray(getattr(image, "cpu", lambda: image)())
    if image.ndim == 3 and image.shape[0] in (1, 3) and image.shape[-1] not in (1, 3):
        image = image.transpose(1, 2, 0)  # CHW -> HWC
    if image.dtype != np.uint8:
        image = np.clip(image, 0.0, 1.0)
    return image


def show(rows: dict, *, titles=None, device=None, n: int = 8):
    """A grid: one row of images per ``{label: images}`` (CHW or HWC, uint8 or float in [0, 1])."""
    import matplotlib.pyplot as plt

    from .plots import stamp

    n = min(n, *(len(images) for images in rows.values()))
    fig, axes = plt.subplots(len(rows), n, figsize=(1.3 * n, 1.45 * len(rows) + 0.3), squeeze=False)
    for r, (label, images) in enumerate(rows.items()):
        for c in range(n):
            ax = axes[r][c]
            ax.imshow(_as_hwc(images[c]))
            ax.set_xticks([])
            ax.set_yticks([])
            if titles is not None and r == 0:
                ax.set_title(str(titles[c]), fontsize=8)
        axes[r][0].set_ylabel(label, rotation=0, ha="right", va="center", fontsize=8)
    stamp(axes[0][-1], device)
    fig.tight_layout()
    return axes


def import_tf_plugin(*, verbose: bool = True):
    """``nvidia.dali.plugin.tf``, or ``None`` with one sentence saying why it is not there."""
    from .frameworks import load_triton_before_tensorflow

    load_triton_before_tensorflow()  # the plugin imports TensorFlow
    try:
        import nvidia.dali.plugin.tf as dali_tf
    except ModuleNotFoundError:
        if verbose:
            print(
                "DALI's TensorFlow plugin is not installed here, so the TensorFlow cells are skipped. It is built "
                "against the installed TensorFlow: `pip install --no-build-isolation "
                "nvidia-dali-tf-plugin-cuda120==<your DALI version>` (Linux; about a minute)."
            )
        return None
    except Exception as error:  # built for another TensorFlow, or DALI itself is missing
        if verbose:
            print(f"DALI's TensorFlow plugin fails to import ({type(error).__name__}: {error}); its cells are skipped.")
        return None
    return dali_tf
