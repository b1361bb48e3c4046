"""TensorFlow and DALI, imported only when a lesson asks for them.

Both are optional: a lesson cell asks ``tf = gpucourse.import_tensorflow()``
and skips its TensorFlow part when the answer is ``None``, after one clear
sentence instead of a traceback. Importing ``gpucourse`` itself never
imports either.
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
from pathlib import Path

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


# TensorFlow's C++ start-up lines that tell a learner nothing. The CUDA ones only say "no NVIDIA driver, so the
# CPU": noise where there is no driver, a real failure where there is one (then they are kept).
TF_NOISE = ("All log messages before absl::InitializeLog()", "oneDNN custom operations are on",
            "This TensorFlow binary is optimized", "To enable the following instructions")
TF_NO_DRIVER_NOISE = ("Could not find cuda drivers on your machine", "failed call to cuInit")


def nvidia_driver_present() -> bool:
    """Whether NVIDIA's driver is installed: its CUDA library loads (CUDA itself is not started)."""
    import ctypes

    try:
        ctypes.CDLL({"win32": "nvcuda.dll", "darwin": "libcuda.dylib"}.get(sys.platform, "libcuda.so.1"))
    except OSError:
        return False
    return True


def is_tensorflow_noise(line: str, driver: bool) -> bool:
    return any(n in line for n in TF_NOISE) or (not driver and any(n in line for n in TF_NO_DRIVER_NOISE))


@contextlib.contextmanager
def quiet_tensorflow_startup():
    """Pass on everything written to the process's standard error except TensorFlow's start-up noise.

    TensorFlow's C++ logs go straight to file descriptor 2 (before its own
    logging starts, so TF_CPP_MIN_LOG_LEVEL cannot stop them): they reach a
    notebook as a red box even when nothing is wrong. Here a thread reads
    them through a pipe and forwards every line that is not noise, at once.
    """
    try:
        sys.stderr.flush()
        real = os.dup(2)
    except (OSError, ValueError, AttributeError):  # no descriptor 2 to hold back
        yield
        return
    driver, (read, write) = nvidia_driver_present(), os.pipe()

    def forward():
        with os.fdopen(read, "rb") as lines:
            for line in lines:
                if not is_tensorflow_noise(line.decode(errors="replace"), driver):
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


def course_set() -> str | None:
    """The pinned set `make` installed into this environment, "gpu" or "cpu"; None when `make` did not."""
    try:
        return Path(sys.prefix, ".gpucourse-set").read_text().strip()
    except OSError:
        return None


def import_tensorflow(*, grow_memory: bool = True, verbose: bool = True):
    """Import TensorFlow quietly, or return ``None`` with a message if it is missing.

    ``grow_memory`` (default) makes TensorFlow allocate GPU memory as it
    needs it instead of taking nearly all of it, so PyTorch in the same
    kernel does not run out. With ``GPUCOURSE_REQUIRE_GPU=1`` (``make
    test-gpu``), a TensorFlow that sees no GPU is an error in the GPU set; in
    the CPU set its cells are skipped, reported as not validated on GPU.
    """
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")  # hide TF's C++ info logs once its logging starts
    load_triton_before_tensorflow()
    try:
        with quiet_tensorflow_startup():
            import tensorflow as tf

            gpus = tf.config.list_physical_devices("GPU")  # starts CUDA: its start-up lines come here
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

    if gpu_required() and not gpus:
        build = "a CPU-only build" if not tf.sysconfig.get_build_info().get("is_cuda_build") else "no CUDA libraries"
        if course_set() == "gpu":
            raise GPURequiredError(f"GPUCOURSE_REQUIRE_GPU=1 and the GPU set is installed, but TensorFlow sees no GPU "
                                   f"({build}). Run `python -m gpucourse doctor`.")
        if verbose:
            print(f"TensorFlow here sees no GPU ({build}; the GPU set, `make lab GPU=1`, has its CUDA libraries): its "
                  "cells are skipped and not validated on GPU.")
        return None
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


def import_dali_tf(*, verbose: bool = True):
    """Import DALI's TensorFlow plugin (``nvidia.dali.plugin.tf``), or return ``None`` saying why not.

    TensorFlow is imported first, through ``import_tensorflow`` (quiet, memory growth on).
    """
    if import_tensorflow(verbose=verbose) is None:
        return None
    try:
        import nvidia.dali.plugin.tf as dali_tf
    except ModuleNotFoundError:
        if verbose:
            print(
                "DALI's TensorFlow plugin is not installed here, so its cells are skipped. It must match the installed "
                "TensorFlow: `pip install --no-build-isolation nvidia-dali-tf-plugin-cuda120==<your DALI version>` (Linux)."
            )
        return None
    except Exception as error:  # built for another TensorFlow, or DALI itself is missing
        if verbose:
            print(f"DALI's TensorFlow plugin fails to import ({type(error).__name__}: {error}); its cells are skipped.")
        return None
    return dali_tf
