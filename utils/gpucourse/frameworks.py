"""TensorFlow and DALI, imported only when a lesson asks: the module, or ``None`` after one
sentence saying why not."""

import contextlib
import ctypes
import importlib
import os
import sys
import tempfile
from pathlib import Path

from .device import gpu_required
from .notebook import seed_tensorflow

INSTALL_HINT = "Install the course environment with `make lab` (or `pip install -e '.[course]'`)."
# TensorFlow's C++ start-up lines that tell a learner nothing; the CUDA ones are noise only where
# there is no driver.
TF_NOISE = (
    "before absl::InitializeLog()",
    "oneDNN custom operations are on",
    "binary is optimized",
    "To enable the following",
)
TF_NO_DRIVER_NOISE = ("Could not find cuda drivers on your machine", "failed call to cuInit")


def course_set() -> str | None:
    """The pinned set `make` installed into this environment, "gpu" or "cpu"; None when `make`
    did not."""
    path = Path(sys.prefix, ".gpucourse-set")
    return path.read_text().strip() if path.exists() else None


def nvidia_driver_present() -> bool:  # its CUDA library loads (CUDA itself is not started)
    with contextlib.suppress(OSError):
        return bool(ctypes.CDLL("nvcuda.dll" if sys.platform == "win32" else "libcuda.so.1"))
    return False


@contextlib.contextmanager
def quiet_tensorflow_startup():
    """Hold back file descriptor 2, then write it back without TensorFlow's C++ start-up noise
    (TF_CPP_MIN_LOG_LEVEL can't)."""
    noise = [n.encode() for n in TF_NOISE + (() if nvidia_driver_present() else TF_NO_DRIVER_NOISE)]
    real = os.dup(2)
    with tempfile.TemporaryFile() as held:
        os.dup2(held.fileno(), 2)
        try:
            yield
        finally:
            os.dup2(real, 2)
            os.close(real)
            held.seek(0)
            os.write(2, b"".join(line for line in held if not any(n in line for n in noise)))


def load_tensorflow():
    """``(tf, the GPUs it sees)``, imported without start-up noise; raises what ``import
    tensorflow`` raises."""
    # TF's C++ info logs, once its logging starts
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    # Triton (PyTorch's compiler) imported after TensorFlow segfaults with our pins
    if "tensorflow" not in sys.modules:
        # no Triton, or a broken one: PyTorch's problem, not TensorFlow's
        with contextlib.suppress(Exception):
            import triton  # noqa: F401
    with quiet_tensorflow_startup():
        import tensorflow as tf

        # starts CUDA: its start-up lines come here
        return tf, tf.config.list_physical_devices("GPU")


def _optional(load, name: str, verbose: bool, hint: str = INSTALL_HINT):
    try:
        return importlib.import_module(load) if isinstance(load, str) else load()
    except ModuleNotFoundError:
        message = f"{name} is not installed here, so its cells are skipped. {hint}"
    except Exception as error:  # a broken install: report it, never crash the lesson
        message = (
            f"{name} fails to import ({error!r}); its cells are skipped. "
            "See `python -m gpucourse doctor`."
        )
    if verbose:
        print(message)
    return None


def import_tensorflow(*, grow_memory: bool = True, verbose: bool = True):
    """TensorFlow, seeded and (``grow_memory``) taking GPU memory only as it needs it, or None
    saying why not."""
    tf, gpus = _optional(load_tensorflow, "TensorFlow", verbose) or (None, None)
    if tf is None:
        return None
    try:  # memory growth, so that PyTorch in the same kernel does not run out
        for gpu in gpus if grow_memory else []:
            tf.config.experimental.set_memory_growth(gpu, True)
    except RuntimeError:  # TensorFlow has started on the GPU already
        print(
            "TensorFlow has already claimed the GPU, so memory growth can no longer be set: "
            "restart the kernel."
        )
    # `make test-gpu`: an error in the GPU set, skipped (not validated) in the CPU set
    if gpu_required() and not gpus:
        build = (
            "no CUDA libraries"
            if tf.sysconfig.get_build_info().get("is_cuda_build")
            else "a CPU-only build"
        )
        if course_set() == "gpu":
            raise RuntimeError(
                "GPUCOURSE_REQUIRE_GPU=1 and the GPU set is installed, but TensorFlow sees no GPU "
                f"({build})."
            )
        if verbose:
            print(
                f"TensorFlow sees no GPU ({build}; `make lab GPU=1` has CUDA): its cells are "
                "skipped, not validated on GPU."
            )
        return None
    seed_tensorflow()
    return tf


def import_dali(*, verbose: bool = True):
    """``nvidia.dali``, or None after one sentence saying why not."""
    return _optional(
        "nvidia.dali", "NVIDIA DALI", verbose, f"It ships for Linux only. {INSTALL_HINT}"
    )


def import_dali_tf(*, verbose: bool = True):
    """DALI's TensorFlow plugin (``nvidia.dali.plugin.tf``), after ``import_tensorflow()``, or
    None saying why not."""
    hint = (
        "It must match TensorFlow: "
        "`pip install --no-build-isolation nvidia-dali-tf-plugin-cuda120==<your DALI version>`."
    )
    return import_tensorflow(verbose=verbose) and _optional(
        "nvidia.dali.plugin.tf", "DALI's TensorFlow plugin", verbose, hint
    )
