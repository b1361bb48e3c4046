"""gpucourse.memory: the estimator, the saved-tensor meter, the cap and the batch-size finder (CPU only)."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from gpucourse import memory


def mlp(width: int = 32, depth: int = 3, classes: int = 5) -> nn.Sequential:
    torch.manual_seed(0)
    layers = [m for _ in range(depth) for m in (nn.Linear(width, width), nn.ReLU())]
    return nn.Sequential(*layers, nn.Linear(width, classes))


def test_estimate_counts_weights_grads_and_adam_state():
    model = mlp()
    params = sum(p.numel() for p in model.parameters())
    est = memory.estimate_memory(model, (8, 32), optimizer="adam")
    assert est.weights == est.gradients == 4 * params
    assert est.optimizer == 2 * 4 * params, "Adam keeps two fp32 moments per parameter"
    assert memory.estimate_memory(model, (8, 32), optimizer="sgd").optimizer == 0
    sgd = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    assert memory.estimate_memory(model, (8, 32), optimizer=sgd).optimizer == 4 * params
    assert est.batch == 8 * 32 * 4
    assert est.total == est.weights + est.gradients + est.optimizer + est.activations + est.batch


def test_estimate_activations_match_what_autograd_saves_and_scale_with_batch():
    model = mlp()
    # Each ReLU output is saved once (it is also the next Linear's input): 3 per sample of 32 floats.
    assert memory.estimate_memory(model, (10, 32)).activations == 3 * 10 * 32 * 4
    assert memory.estimate_memory(model, torch.empty(40, 32)).activations == 3 * 40 * 32 * 4


def test_estimate_uses_no_memory_and_leaves_the_model_alone():
    model = mlp()
    before = {name: p for name, p in model.named_parameters()}
    est = memory.estimate_memory(model, (10**7, 32))  # 1.2 GiB of fp32 input: only on the meta device
    assert est.batch == 10**7 * 32 * 4
    assert all(p is before[name] and p.device.type == "cpu" for name, p in model.named_parameters())


def test_estimate_rejects_bad_input_clearly():
    with pytest.raises(ValueError, match="unknown optimizer"):
        memory.estimate_memory(mlp(), (2, 32), optimizer="lion9000")
    with pytest.raises(TypeError, match="shape tuple"):
        memory.estimate_memory(mlp(), "a batch")


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


def test_graph_nodes():
    model = mlp()
    total = 0
    for _ in range(3):
        loss = model(torch.randn(4, 32)).sum()
        total = total + loss
    assert memory.graph_nodes(total) > memory.graph_nodes(loss) > 0
    assert memory.graph_nodes(total.item()) == 0 and memory.graph_nodes(loss.detach()) == 0


def test_finder_grows_then_bisects():
    card = memory.SimulatedGPU(total=1000, fixed=100, per_sample=7)  # fits up to 128
    result = memory.find_batch_size(card.step, safety=0.9)
    assert (result.largest, result.first_failing, result.recommended) == (128, 129, 115)
    sizes = [size for size, _ in result.tried]
    assert sizes[:9] == [1, 2, 4, 8, 16, 32, 64, 128, 256], "grows by doubling until the first OOM"
    assert len(sizes) <= 20 and sizes == card.calls


def test_finder_from_a_start_too_large_and_up_to_a_limit():
    card = memory.SimulatedGPU(total=1000, fixed=100, per_sample=7)
    assert memory.find_batch_size(card.step, start=1000).largest == 128
    capped = memory.find_batch_size(card.step, limit=50)
    assert capped.largest == 50 and capped.first_failing is None


def test_finder_never_fits_gives_a_clear_error():
    card = memory.SimulatedGPU(total=100, fixed=100, per_sample=1)
    with pytest.raises(memory.DoesNotFitError, match="even a batch of 1"):
        memory.find_batch_size(card.step, start=16)


def test_finder_lets_other_errors_through_and_checks_arguments():
    def broken(batch_size):
        raise RuntimeError("mat1 and mat2 shapes cannot be multiplied")

    with pytest.raises(RuntimeError, match="shapes"):
        memory.find_batch_size(broken)
    with pytest.raises(ValueError):
        memory.find_batch_size(lambda n: None, start=0)
    with pytest.raises(ValueError):
        memory.find_batch_size(lambda n: None, safety=1.5)


def test_finder_frees_what_a_failed_try_held():
    import weakref

    held = []

    def step(batch_size):
        activations = torch.empty(batch_size, 1000)
        held.append(weakref.ref(activations))
        if batch_size > 8:
            raise torch.OutOfMemoryError("simulated")

    memory.find_batch_size(step, limit=64)
    assert all(ref() is None for ref in held), "a failed try's tensors must be freed"


def test_cap_checks():
    assert memory.check_cap(4 * memory.GiB, 16 * memory.GiB) == 0.25
    with pytest.raises(memory.MemoryCapError, match="larger than the card"):
        memory.check_cap(100 * memory.GiB, 16 * memory.GiB)
    with pytest.raises(memory.MemoryCapError, match="positive"):
        memory.check_cap(0, 16 * memory.GiB)
    if not torch.cuda.is_available():
        with pytest.raises(memory.MemoryCapError, match="no CUDA GPU"):
            memory.cap_memory(memory.GiB, "cpu")


def test_peak_memory_on_cpu_and_timeline_from_a_snapshot():
    model = mlp()
    small = memory.peak_memory(lambda: model(torch.randn(8, 32)).sum().backward(), "cpu")
    large = memory.peak_memory(lambda: model(torch.randn(32, 32)).sum().backward(), "cpu")
    assert large.bytes == 4 * small.bytes > 0
    snapshot = {"device_traces": [[
        {"action": "segment_alloc", "size": 4096},
        {"action": "alloc", "size": 100},
        {"action": "alloc", "size": 50},
        {"action": "free_requested", "size": 100},
        {"action": "free_completed", "size": 100},
    ]]}
    assert memory.memory_timeline(snapshot) == ([1, 2, 4], [100, 150, 50])
    assert memory.memory_timeline({"device_traces": []}) == ([], [])


def test_cuda_reading_is_none_off_cuda_and_fmt_bytes():
    assert memory.cuda_reading("cpu") is None
    assert memory.fmt_bytes(1536) == "1.50 KiB" and memory.fmt_bytes(None) == "n/a"
    assert memory.fmt_bytes(3 * memory.GiB) == "3.00 GiB"
