"""gpucourse.notebook: seeding, and a cell run out of order or unanswered says what to do, and
still fails."""

import random

import numpy as np
import pytest
import torch
from nbclient import NotebookClient
from nbformat.v4 import new_code_cell, new_notebook

import gpucourse


def draw():
    return random.random(), float(np.random.rand()), float(torch.rand(1))


def test_same_seed_same_numbers():
    gpucourse.set_seed(3)
    first = draw()
    gpucourse.set_seed(3)
    assert draw() == first
    gpucourse.set_seed(4)
    assert draw() != first


def run(*sources):
    nb = new_notebook(cells=[new_code_cell(s) for s in sources])
    nb.metadata["kernelspec"] = {
        "name": "python3",
        "display_name": "Python 3",
        "language": "python",
    }
    NotebookClient(nb, timeout=120, allow_errors=True).execute()
    return nb


def error_of(cell):
    (error,) = [o for o in cell.outputs if o.output_type == "error"]
    return error


@pytest.mark.slow
def test_friendly_hints_keep_the_error():
    nb = run(
        "import gpucourse; gpucourse.setup_notebook()",
        "model_defined_later + 1",
        "def exercise():\n    raise NotImplementedError()\nexercise()",
        "1 / 0",
        "raise NotImplementedError('Cannot copy out of meta tensor; no data!')",
    )
    name_error, todo, other, library = (error_of(c) for c in nb.cells[1:])
    assert name_error.ename == "NameError", "nbgrader must still see a failing cell"
    assert "earlier cell" in "\n".join(name_error.traceback)
    assert todo.ename == "NotImplementedError" and "not answered yet" in "\n".join(todo.traceback)
    assert other.ename == "ZeroDivisionError" and "earlier cell" not in "\n".join(other.traceback)
    assert library.ename == "NotImplementedError" and "not answered yet" not in "\n".join(
        library.traceback
    ), "a library's own NotImplementedError is not an unanswered exercise"
