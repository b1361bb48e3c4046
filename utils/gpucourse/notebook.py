"""What every lesson's set-up cell does: seed everything, and make a cell run out of order or an
unanswered exercise say what to do (the error stays, so nbgrader still sees a failing cell)."""

import random
import sys

_last_seed: int | None = None

HINTS = {
    NameError: "{value}. It is defined in an earlier cell that has not run in this kernel: "
    "run the notebook from the top (Run > Run All Above Selected Cell), then this cell again.",
    NotImplementedError: "An exercise is not answered yet: replace `raise NotImplementedError()` "
    "in its answer cell with your code, run that cell, then this one.",
}


def _handler(shell, etype, value, tb, tb_offset=None):
    """IPython's custom exception handler: the usual traceback plus one hint."""
    stb = shell.InteractiveTB.structured_traceback(etype, value, tb, tb_offset=tb_offset)
    hint = next((text for kind, text in HINTS.items() if issubclass(etype, kind)), "")
    # a library's own one says what it means
    if hint and not (issubclass(etype, NotImplementedError) and str(value)):
        stb = [*stb, "", "\x1b[1;33m" + hint.format(value=value) + "\x1b[0m"]
    # what IPython's showtraceback calls: the kernel sends the error
    shell._showtraceback(etype, value, stb)
    return stb


def set_seed(seed: int = 0) -> int:
    """Seed Python, NumPy, PyTorch (every CUDA device) and TensorFlow if it is loaded (never
    importing it)."""
    global _last_seed
    import numpy as np
    import torch

    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    _last_seed = seed
    seed_tensorflow()
    return seed


def seed_tensorflow() -> None:
    """Seed TensorFlow, if it is loaded, with the last seed ``set_seed`` was given
    (``import_tensorflow`` calls it)."""
    tf = sys.modules.get("tensorflow")
    if tf is not None and _last_seed is not None:
        tf.keras.utils.set_random_seed(_last_seed)


def setup_notebook(seed: int = 0) -> None:
    """Seed every generator and, inside IPython, install the error hints."""
    set_seed(seed)
    shell = sys.modules["IPython"].get_ipython() if "IPython" in sys.modules else None
    if shell is not None:
        shell.set_custom_exc(tuple(HINTS), _handler)
