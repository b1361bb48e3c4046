"""gpucourse.memory: the saved-tensor meter and peak memory (its CUDA path on a fake allocator).

The estimator, the simulated card and the batch-size finder live in lesson 07's cells, which check
them under nbval.
"""

from __future__ import annotations

import torch
from torch import nn

from gpucourse import memory


def mlp(width: int = 32, depth: int = 3, classes: int = 5) -> nn.Sequential:
    torch.manual_seed(0)
    layers = [m for _ in range(depth) for m in (nn.Linear(width, width), nn.ReLU())]
    return nn.Sequential(*layers, nn.Linear(width, classes))


class FakeAllocator:
    """CUDA's allocator counters, faked: live bytes are ``other`` + what a step allocates + the
    model's gradients."""

    def __init__(self, model: nn.Module, other: int):
        self.model, self.other, self.step_bytes = model, other, 0
        self.peak = 10**12  # a bigger step ran earlier: without a reset, its peak would be read
        self.calls: list[str] = []

    def allocated(self, device=None) -> int:
        grads = sum(p.grad.nbytes for p in self.model.parameters() if p.grad is not None)
        return self.other + self.step_bytes + grads

    def alloc(self, n: int) -> None:
        self.step_bytes += n
        self.peak = max(self.peak, self.allocated())

    def install(self, monkeypatch) -> None:
        monkeypatch.setattr(torch.cuda, "memory_allocated", self.allocated)
        monkeypatch.setattr(
            torch.cuda,
            "max_memory_allocated",
            lambda device=None: self.calls.append("max") or self.peak,
        )
        monkeypatch.setattr(
            torch.cuda, "synchronize", lambda device=None: self.calls.append("sync")
        )

        def reset(device=None):
            self.calls.append("reset")
            self.peak = self.allocated()

        monkeypatch.setattr(torch.cuda, "reset_peak_memory_stats", reset)


def test_peak_memory_on_cuda_starts_from_the_same_baseline_in_every_row(monkeypatch):
    model = mlp()
    x = torch.randn(8, 32)
    grads = sum(p.nbytes for p in model.parameters())
    # weights, optimizer state, data: alive before and after the step
    fake = FakeAllocator(model, other=10_000)
    fake.install(monkeypatch)

    def step(zero_grad_first: bool):
        def run():
            fake.calls.append("step")
            if zero_grad_first:
                model.zero_grad(set_to_none=True)
            fake.alloc(5_000)  # the activations
            model(x).sum().backward()  # the gradients appear...
            fake.alloc(0)  # ...and the allocator sees them while the activations are still counted
            fake.alloc(-5_000)

        return run

    model(x).sum().backward()  # gradients left alive by an earlier step
    rows = {first: memory.peak_memory(step(first), "cuda", model=model) for first in (True, False)}
    assert rows == {True: 5_000 + grads, False: 5_000 + grads}, (
        "activations + gradients, whether or not the step clears them"
    )
    assert fake.calls[:5] == ["sync", "reset", "step", "sync", "max"], (
        "reset before the step, synchronize before reading"
    )
    model(x).sum().backward()
    assert memory.peak_memory(step(True), "cuda") == 5_000, (
        "without model=, the old gradients sit in the baseline"
    )


def test_peak_memory_elsewhere_is_the_peak_saved_for_backward():
    model = mlp()
    small, large = torch.randn(8, 32), torch.randn(32, 32)
    peaks = [
        memory.peak_memory(lambda b=b: model(b).sum().backward(), "cpu", exclude=[b])
        for b in (small, large)
    ]
    assert peaks[1] == 4 * peaks[0] == 4 * 3 * 8 * 32 * 4, (
        "three ReLU outputs saved, linear in the batch"
    )


def test_meter_releases_after_backward_and_keeps_a_live_graph():
    model = mlp()
    x = torch.randn(16, 32)
    with memory.SavedTensorMeter() as meter:
        loss = model(x).sum()
    kept = meter.live
    assert kept >= 3 * 16 * 32 * 4
    loss.backward()
    assert meter.live == 0 and meter.peak == kept
    with memory.SavedTensorMeter() as meter:
        outputs = [model(x) for _ in range(3)]  # three graphs kept alive by their outputs
    assert meter.live == 3 * (kept - x.nbytes) + x.nbytes, (
        "x is shared, each graph keeps its own activations"
    )
    del outputs
    assert meter.live == 0
    with memory.SavedTensorMeter() as meter, torch.no_grad():
        model(x)
    assert meter.peak == 0
