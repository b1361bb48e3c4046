"""gpucourse.sizing: one helper scales every demo to the device."""

import torch

from gpucourse import workload
from gpucourse.sizing import is_grading


def test_cpu_gets_the_cpu_size(monkeypatch):
    monkeypatch.delenv("NBGRADER_EXECUTION", raising=False)
    assert workload(torch.device("cpu"), cpu=1, gpu=100) == 1
    assert workload("cpu", cpu=1, gpu=100) == 1


def test_gpu_gets_the_gpu_size(monkeypatch):
    monkeypatch.delenv("NBGRADER_EXECUTION", raising=False)
    assert workload(torch.device("cuda", 0), cpu=1, gpu=100) == 100
    assert workload("cuda:1", cpu=1, gpu=100) == 100


def test_grading_shrinks_the_demo(monkeypatch):
    monkeypatch.setenv("NBGRADER_EXECUTION", "autograde")
    assert is_grading()
    assert workload("cuda", cpu=10, gpu=100, grading=2) == 2
    assert workload("cuda", cpu=10, gpu=100) == 10, "without a grading size, grading uses the CPU size"
