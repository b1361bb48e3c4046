"""gpucourse.memory: the saved-tensor meter, peak memory (its CUDA path on a fake allocator), the estimator, the finder."""

from __future__ import annotations

import weakref

import pytest
import torch
from torch import nn

from gpucourse import memory


def mlp(width: int = 32, depth: int = 3, classes: int = 5) -> nn.Sequential:
    torch.manual_seed(0)
    layers = [m for _ in range(depth) for m in (nn.Linear(width, width), nn.ReLU())]
    return nn.Sequential(*layers, nn.Linear(width, classes))


class FakeAllocator:
    """CUDA's allocator counters, faked: live bytes are ``other`` + what a step allocates + the model's gradients."""

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
        monkeypatch.setattr(torch.cuda, "max_memory_allocated", lambda device=None: self.calls.append("max") or self.peak)
        monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: self.calls.append("sync"))

        def reset(device=None):
            self.calls.append("reset")
            self.peak = self.allocated()

        monkeypatch.setattr(torch.cuda, "reset_peak_memory_stats", reset)


def test_peak_memory_on_cuda_starts_from_the_same_baseline_in_every_row(monkeypatch):
    model = mlp()
    x = torch.randn(8, 32)
    grads = sum(p.nbytes for p in model.parameters())
    fake = FakeAllocator(model, other=10_000)  # weights, optimizer state, data: alive before and after the step
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
    assert rows == {True: 5_000 + grads, False: 5_000 + grads}, "activations + gradients, whether or not the step clears them"
    assert fake.calls[:5] == ["sync", "reset", "step", "sync", "max"], "reset before the step, synchronize before reading"
    model(x).sum().backward()
    assert memory.peak_memory(step(True), "cuda") == 5_000, "without model=, the old gradients sit in the baseline"


def test_peak_memory_elsewhere_is_the_peak_saved_for_backward():
    model = mlp()
    small, large = torch.randn(8, 32), torch.randn(32, 32)
    peaks = [memory.peak_memory(lambda b=b: model(b).sum().backward(), "cpu", exclude=[b]) for b in (small, large)]
    assert peaks[1] == 4 * peaks[0] == 4 * 3 * 8 * 32 * 4, "three ReLU outputs saved, linear in the batch"


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
    assert meter.live == 3 * (kept - x.nbytes) + x.nbytes, "x is shared, each graph keeps its own activations"
    del outputs
    assert meter.live == 0
    with memory.SavedTensorMeter() as meter, torch.no_grad():
        model(x)
    assert meter.peak == 0


def test_estimate_counts_weights_grads_adam_and_what_autograd_saves():
    model = mlp()
    params = sum(p.numel() for p in model.parameters())
    est = memory.estimate_memory(model, (10, 32), "adam")
    assert est.weights == est.gradients == 4 * params and est.optimizer == 2 * 4 * params
    assert memory.estimate_memory(model, (10, 32), "sgd").optimizer == 0
    # Each ReLU output is saved once (it is also the next Linear's input): 3 per sample of 32 floats.
    assert est.activations == 3 * 10 * 32 * 4 and est.batch == 10 * 32 * 4
    assert memory.estimate_memory(model, torch.empty(40, 32)).activations == 3 * 40 * 32 * 4
    assert est.total == est.fixed + est.activations + est.batch and "total" in str(est)


def test_estimate_uses_no_memory_leaves_the_model_alone_and_rejects_bad_input():
    model = mlp()
    before = dict(model.named_parameters())
    assert memory.estimate_memory(model, (10**7, 32)).batch == 10**7 * 32 * 4  # 1.2 GiB, only on meta
    assert all(p is before[name] and p.device.type == "cpu" for name, p in model.named_parameters())
    with pytest.raises(ValueError, match="unknown optimizer"):
        memory.estimate_memory(model, (2, 32), "lion9000")
    with pytest.raises(ValueError, match="shape tuple"):
        memory.estimate_memory(model, "a batch")


def test_finder_grows_then_bisects_and_halves_a_start_too_large():
    card = memory.SimulatedGPU(total=1000, fixed=100, per_sample=7)  # fits up to 128
    result = memory.find_batch_size(card.step, safety=0.9)
    assert (result.largest, result.first_failing, result.recommended) == (128, 129, 115)
    sizes = [size for size, _ in result.tried]
    assert sizes[:9] == [1, 2, 4, 8, 16, 32, 64, 128, 256] and len(sizes) <= 20, "doubles until the first OOM"
    assert memory.find_batch_size(card.step, start=1000).largest == 128
    capped = memory.find_batch_size(card.step, limit=50)
    assert capped.largest == 50 and capped.first_failing is None


def test_finder_errors_are_clear_and_only_ooms_are_caught():
    with pytest.raises(RuntimeError, match="even a batch of 1"):
        memory.find_batch_size(memory.SimulatedGPU(total=100, fixed=100, per_sample=1).step, start=16)

    def broken(batch_size):
        raise RuntimeError("mat1 and mat2 shapes cannot be multiplied")

    with pytest.raises(RuntimeError, match="shapes"):
        memory.find_batch_size(broken)
    for bad in ({"start": 0}, {"start": 8, "limit": 4}, {"start": 2.5}):
        with pytest.raises(ValueError):
            memory.find_batch_size(lambda n: None, **bad)


def test_finder_frees_what_a_failed_try_held():
    held = []

    def step(batch_size):
        activations = torch.empty(batch_size, 1000)
        held.append(weakref.ref(activations))
        if batch_size > 8:
            raise torch.OutOfMemoryError("simulated")

    memory.find_batch_size(step, limit=64)
    assert all(ref() is None for ref in held), "a failed try's tensors must be freed"


def test_fmt_bytes():
    assert memory.fmt_bytes(1536) == "1.50 KiB" and memory.fmt_bytes(3 * memory.GiB) == "3.00 GiB"
    assert memory.fmt_bytes(100) == "100 B"
