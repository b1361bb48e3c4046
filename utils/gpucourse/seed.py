"""One call seeds Python, NumPy, PyTorch and (if it is loaded) TensorFlow."""

from __future__ import annotations

import random
import sys

_last_seed: int | None = None


def set_seed(seed: int = 0) -> int:
    """Seed every random number generator the course uses; returns ``seed``.

    TensorFlow is seeded only if it is already imported (seeding it must not
    import it); ``gpucourse.import_tensorflow`` applies the last seed when it
    loads TensorFlow later.
    """
    global _last_seed
    import numpy as np
    import torch

    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)  # also seeds every CUDA device
    if "tensorflow" in sys.modules:
        seed_tensorflow(seed)
    _last_seed = seed
    return seed


def seed_tensorflow(seed: int | None = None) -> None:
    """Seed TensorFlow (Python, NumPy and TF) with ``seed`` or the last seed set."""
    seed = _last_seed if seed is None else seed
    if seed is not None:
        import tensorflow as tf

        tf.keras.utils.set_random_seed(seed)
