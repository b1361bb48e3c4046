"""gpucourse: the helper of the course "GPUs for Machine Learning" (one module per concept).

Names load on first use, so importing it never imports PyTorch, TensorFlow or DALI and ``python -m
gpucourse doctor`` can report a broken install instead of crashing on it.
"""

import importlib
import importlib.util
import logging

__version__ = "0.2.0"
# PyTorch's CUDA_HOME warning on a CPU ("No CUDA runtime is found"), logged when the benchmark
# utilities or torch.compile load torch.utils.cpp_extension: it tells a learner nothing
logging.getLogger("torch.utils.cpp_extension").setLevel(logging.ERROR)

# name -> module; every other module is reached as gpucourse.plots, gpucourse.memory, ...
_EXPORTS = {
    "choose_device": "device",
    "device_facts": "device",
    "DeviceError": "device",
    "amp_dtype": "device",
    "workload": "device",
    "is_grading": "device",
    "benchmark": "timing",
    "setup_notebook": "notebook",
    "set_seed": "notebook",
    "make_shapes": "data",
    "shapes_dataset": "data",
    "write_image_folder": "data",
    "SmallCNN": "models",
    "import_tensorflow": "frameworks",
    "import_dali": "frameworks",
    "import_dali_tf": "frameworks",
}
__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    if name in _EXPORTS:
        value = getattr(importlib.import_module(f"gpucourse.{_EXPORTS[name]}"), name)
        globals()[name] = value
        return value
    if not name.startswith("_") and importlib.util.find_spec(f"gpucourse.{name}") is not None:
        return importlib.import_module(f"gpucourse.{name}")
    raise AttributeError(f"module 'gpucourse' has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(__all__))
