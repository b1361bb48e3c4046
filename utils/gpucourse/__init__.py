"""gpucourse: the helper package of the course "GPUs for Machine Learning".

One module per concept:

========== ==========================================================
device     choose the device (with a clear CPU fallback), its facts, and the demo sizes for it
timing     correct timing on CPU and GPU (warm-up, sync, median), as lesson 01 writes it
data       the course's deterministic image set (memory or JPEG tree)
models     the course's small CNN
frameworks TensorFlow and DALI, imported only when a lesson asks
plots      the few plots several lessons share
loaders    the course's JPEG files as a dataset; where a training loop's time goes
memory     what a training step keeps in memory, its peak, the batch-size finder
launch     run ``torchrun`` from a notebook, with a timeout
notebook   what every lesson's set-up cell does (seed everything, friendly errors)
doctor     ``python -m gpucourse doctor``: the environment report
bench      ``python -m gpucourse bench``: the machine's report card (matmul TFLOP/s, copy GB/s vs. peak)
========== ==========================================================

Importing ``gpucourse`` is cheap and never imports PyTorch, TensorFlow or
DALI: names are loaded on first use, so ``python -m gpucourse doctor`` can
report a broken install instead of crashing on it.
"""

from __future__ import annotations

import importlib
import importlib.util

__version__ = "0.1.0"

_EXPORTS = {
    "choose_device": "device",
    "device_facts": "device",
    "DeviceError": "device",
    "GPURequiredError": "device",
    "is_colab": "device",
    "amp_dtype": "device",
    "workload": "device",
    "is_grading": "device",
    "benchmark": "timing",
    "Timing": "timing",
    "set_seed": "notebook",
    "make_shapes": "data",
    "shapes_dataset": "data",
    "write_image_folder": "data",
    "CLASSES": "data",
    "SmallCNN": "models",
    "setup_notebook": "notebook",
    "import_tensorflow": "frameworks",
    "import_dali": "frameworks",
    "import_dali_tf": "frameworks",
    "tf_grow_memory": "frameworks",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    module = _EXPORTS.get(name)
    if module is None:
        if not name.startswith("_") and importlib.util.find_spec(f"gpucourse.{name}") is not None:
            return importlib.import_module(f"gpucourse.{name}")  # a module: gpucourse.plots, gpucourse.doctor

        raise AttributeError(f"module 'gpucourse' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"gpucourse.{module}"), name)
    globals()[name] = value
    return value


def __dir__():
    return sorted(list(globals()) + __all__)
