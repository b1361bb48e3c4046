"""TensorFlow and DALI, imported only when a lesson asks for them.

Both are optional: a lesson cell asks ``tf = gpucourse.import_tensorflow()``
and skips its TensorFlow part when the answer is ``None``, after one clear
sentence instead of a traceback. Importing ``gpucourse`` itself never
imports either.
"""

from __future__ import annotations

import os

INSTALL_HINT = "Install the course environment with `make lab` (or `pip install -e '.[course]'`)."


def load_triton_before_tensorflow() -> None:
    """Import Triton (PyTorch's compiler) first, where it is installed and TensorFlow is not loaded yet.

    With the course's pins, importing Triton *after* TensorFlow crashes the
    process with a segmentation fault, and ``import torchvision`` imports
    Triton (through ``torch._dynamo``). Loaded first, both work. Costs about
    a second, once; does nothing without Triton.
    """
    import importlib.util
    import sys

    if "tensorflow" in sys.modules or "triton" in sys.modules or importlib.util.find_spec("triton") is None:
        return
    try:
        import triton  # noqa: F401
    except Exception:  # a broken Triton is PyTorch's problem, not a reason to skip TensorFlow
        pass


def import_tensorflow(*, grow_memory: bool = True, verbose: bool = True):
    """Import TensorFlow quietly, or return ``None`` with a message if it is missing.

    ``grow_memory`` (default) makes TensorFlow allocate GPU memory as it
    needs it instead of taking nearly all of it, so PyTorch in the same
    kernel does not run out.
    """
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")  # hide TF's C++ info logs
    load_triton_before_tensorflow()
    try:
        import tensorflow as tf
    except ModuleNotFoundError:
        if verbose:
            print(f"TensorFlow is not installed here, so the TensorFlow cells are skipped. {INSTALL_HINT}")
        return None
    except Exception as error:  # a broken install: report it, never crash the lesson
        if verbose:
            print(
                f"TensorFlow is installed but fails to import ({type(error).__name__}: {error}); "
                "its cells are skipped. Run `python -m gpucourse doctor` for a diagnosis."
            )
        return None
    if grow_memory:
        tf_grow_memory(tf)
    from .device import GPURequiredError, gpu_required

    if gpu_required() and not tf.config.list_physical_devices("GPU"):
        raise GPURequiredError(
            "GPUCOURSE_REQUIRE_GPU=1, but TensorFlow sees no GPU. "
            "Run `python -m gpucourse doctor`: TensorFlow may lack its CUDA libraries."
        )
    from .notebook import seed_tensorflow

    seed_tensorflow()
    return tf


def tf_grow_memory(tf=None) -> bool:
    """Turn on memory growth for every GPU TensorFlow sees; False if it is too late."""
    if tf is None:
        import tensorflow as tf
    try:
        for gpu in tf.config.list_physical_devices("GPU"):
            tf.config.experimental.set_memory_growth(gpu, True)
    except RuntimeError:
        print(
            "TensorFlow has already claimed the GPU, so memory growth can no longer be set: "
            "restart the kernel and run the cells in order."
        )
        return False
    return True


def import_dali(*, verbose: bool = True):
    """Import ``nvidia.dali``, or return ``None`` with a message if it is missing."""
    try:
        import nvidia.dali as dali
    except ModuleNotFoundError:
        if verbose:
            print(
                "NVIDIA DALI is not installed here (it ships for Linux only), so the DALI cells are skipped. "
                + INSTALL_HINT
            )
        return None
    except Exception as error:
        if verbose:
            print(f"DALI is installed but fails to import ({type(error).__name__}: {error}); its cells are skipped.")
        return None
    return dali
