"""TensorFlow and DALI, imported only when a lesson asks: the module, or ``None`` after one sentence saying why not."""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import os
import sys
import threading
from pathlib import Path

from .device import GPURequiredError, gpu_required
from .notebook import seed_tensorflow

INSTALL_HINT = "Install the course environment with `make lab` (or `pip install -e '.[course]'`)."
# TensorFlow's C++ start-up lines that tell a learner nothing. The CUDA ones only say "no NVIDIA driver, so the
# CPU": noise where there is no driver, a real failure where there is one (then they are kept).
TF_NOISE = ("All log messages before absl::InitializeLog()", "oneDNN custom operations are on",
            "This TensorFlow binary is optimized", "To enable the following instructions")
TF_NO_DRIVER_NOISE = ("Could not find cuda drivers on your machine", "failed call to cuInit")


def course_set() -> str | None:
    """The pinned set `make` installed into this environment, "gpu" or "cpu"; None when `make` did not."""
    try:
        return Path(sys.prefix, ".gpucourse-set").read_text().strip()
    except OSError:
        return None


def nvidia_driver_present() -> bool:
    """Whether NVIDIA's driver is installed: its CUDA library loads (CUDA itself is not started)."""
    import ctypes

    with contextlib.suppress(OSError):
        return bool(ctypes.CDLL({"win32": "nvcuda.dll", "darwin": "libcuda.dylib"}.get(sys.platform, "libcuda.so.1")))
    return False


@contextlib.contextmanager
def quiet_tensorflow_startup():
    """Forward all that is written to file descriptor 2 but TensorFlow's C++ start-up noise (a red box in a notebook)."""
    sys.stderr.flush()
    real, (read, write) = os.dup(2), os.pipe()  # TF_CPP_MIN_LOG_LEVEL cannot stop these: they come before TF's logging
    noise = [n.encode() for n in TF_NOISE + (() if nvidia_driver_present() else TF_NO_DRIVER_NOISE)]

    def forward():
        with os.fdopen(read, "rb") as lines:
            for line in lines:
                if not any(n in line for n in noise):
                    os.write(real, line)

    thread = threading.Thread(target=forward, daemon=True)
    thread.start()
    os.dup2(write, 2)
    os.close(write)
    try:
        yield
    finally:
        sys.stderr.flush()
        os.dup2(real, 2)  # closes the pipe's last writer: the thread reads to the end and stops
        thread.join(timeout=10)
        os.close(real)


def load_tensorflow():
    """``(tf, the GPUs it sees)``, imported without start-up noise; raises what ``import tensorflow`` raises."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")  # TF's C++ info logs, once its logging starts
    # With the course's pins, importing Triton (PyTorch's compiler; `import torchvision` does) after TensorFlow
    # crashes the process with a segmentation fault. Imported first, both work.
    if "tensorflow" not in sys.modules and "triton" not in sys.modules and importlib.util.find_spec("triton"):
        with contextlib.suppress(Exception):  # a broken Triton is PyTorch's problem, not a reason to skip TensorFlow
            import triton  # noqa: F401
    with quiet_tensorflow_startup():
        import tensorflow as tf

        return tf, tf.config.list_physical_devices("GPU")  # starts CUDA: its start-up lines come here


def _optional(load, name: str, verbose: bool, hint: str = INSTALL_HINT):
    """``load()`` (or import the module named ``load``), or None after one sentence: not installed, or the import's error."""
    try:
        return importlib.import_module(load) if isinstance(load, str) else load()
    except ModuleNotFoundError:
        message = f"{name} is not installed here, so its cells are skipped. {hint}"
    except Exception as error:  # a broken install: report it, never crash the lesson
        message = (f"{name} is installed but fails to import ({type(error).__name__}: {error}); its cells are skipped. "
                   "Run `python -m gpucourse doctor` for a diagnosis.")
    if verbose:
        print(message)
    return None


def import_tensorflow(*, grow_memory: bool = True, verbose: bool = True):
    """TensorFlow, seeded and (``grow_memory``) taking GPU memory only as it needs it, or None saying why not."""
    tf, gpus = _optional(load_tensorflow, "TensorFlow", verbose) or (None, None)
    if tf is None:
        return None
    if grow_memory:
        tf_grow_memory(tf)  # so PyTorch in the same kernel does not run out
    if gpu_required() and not gpus:  # `make test-gpu`: an error in the GPU set, skipped (not validated) in the CPU set
        build = "no CUDA libraries" if tf.sysconfig.get_build_info().get("is_cuda_build") else "a CPU-only build"
        if course_set() == "gpu":
            raise GPURequiredError(f"GPUCOURSE_REQUIRE_GPU=1 and the GPU set is installed, but TensorFlow sees no GPU "
                                   f"({build}). Run `python -m gpucourse doctor`.")
        if verbose:
            print(f"TensorFlow here sees no GPU ({build}; the GPU set, `make lab GPU=1`, has its CUDA libraries): its "
                  "cells are skipped and not validated on GPU.")
        return None
    seed_tensorflow()
    return tf


def tf_grow_memory(tf) -> bool:
    """Turn on memory growth for every GPU TensorFlow sees; False, saying so, if it is too late."""
    try:
        for gpu in tf.config.list_physical_devices("GPU"):
            tf.config.experimental.set_memory_growth(gpu, True)
        return True
    except RuntimeError:
        print("TensorFlow has already claimed the GPU, so memory growth can no longer be set: restart the kernel.")
        return False


def import_dali(*, verbose: bool = True):
    """``nvidia.dali``, or None after one sentence saying why not."""
    return _optional("nvidia.dali", "NVIDIA DALI", verbose, f"It ships for Linux only. {INSTALL_HINT}")


def import_dali_tf(*, verbose: bool = True):
    """DALI's TensorFlow plugin (``nvidia.dali.plugin.tf``), after ``import_tensorflow()``, or None saying why not."""
    if import_tensorflow(verbose=verbose) is None:
        return None
    return _optional("nvidia.dali.plugin.tf", "DALI's TensorFlow plugin", verbose, "It must match TensorFlow: "
                     "`pip install --no-build-isolation nvidia-dali-tf-plugin-cuda120==<your DALI version>` (Linux).")
