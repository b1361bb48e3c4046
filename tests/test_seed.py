"""gpucourse.seed: one call makes Python, NumPy and PyTorch repeat themselves."""

import random
import subprocess
import sys

import numpy as np
import torch

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


def test_seeding_does_not_import_tensorflow():
    code = "import sys, gpucourse; gpucourse.set_seed(1); print('tensorflow' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"
