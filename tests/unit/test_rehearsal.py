"""The CUDA rehearsal against what PyTorch's CUDA does (its source, as installed):

- a blocking copy and a read go through ``memcpy_and_sync`` and ``stream_synchronize``, which call
  ``warn_or_error_on_sync`` (``torch/include/c10/cuda/CUDAFunctions.h``); a non-blocking copy is
  ``cudaMemcpyAsync`` alone (``aten/src/ATen/native/cuda/Copy.cu``);
- ``torch.tensor(data, device=...)`` builds on the host, then copies without ``non_blocking``
  (``torch/csrc/utils/tensor_new.cpp``); ``Module.to`` copies each parameter with ``t.to(...)``
  from ``torch/nn/modules/module.py``;
- a non-blocking copy between the device and pageable host memory is that ``cudaMemcpyAsync``
  alone, reported by nothing, though the driver may make it wait for the stream to stage the
  memory (the CUDA Runtime API's "API synchronization behavior", asynchronous memcpy, items 1
  and 3); from pinned memory it runs ahead;
- ``torch.cuda.synchronize()`` is ``device_synchronize``, which waits without reporting
  (``c10/cuda/CUDAFunctions.cpp``); the profiler's ``__exit__`` calls it
  (``torch/autograd/profiler.py``).
"""

import shutil
import sys
import warnings

import pytest
import torch
from coursetools.rehearsal import SYNC_MESSAGE, Rehearsal, parse

import gpucourse


def reported(rehearsal: Rehearsal, code: str, namespace: dict) -> list:
    """Run `code` as a notebook's cell would; the (file, line) of each synchronization it made."""
    before = len(rehearsal.syncs)
    exec(compile(code, "<cell>", "exec"), namespace)
    return rehearsal.syncs.reported[before:]


def test_placement_as_on_cuda():
    with Rehearsal("t4") as r:
        host = torch.ones(4)
        batch = host.to("cuda")
        assert (host.device.type, batch.device, batch.is_cuda) == (
            "cpu",
            torch.device("cuda:0"),
            True,
        )
        assert (batch * 2 + 1).sum().device.type == "cuda"  # results stay on the device
        assert torch.zeros(2, device="cuda").device.type == "cuda"
        assert batch.cpu().device.type == "cpu" and batch.device.type == "cuda"
        with pytest.raises(RuntimeError, match="Expected all tensors to be on the same device"):
            batch + host  # the error lesson 02 teaches
        batch + torch.tensor(2.0)  # a 0-d host tensor is allowed, as CUDA allows it
        with pytest.raises(TypeError, match="can't convert cuda:0 device type tensor to numpy"):
            batch.numpy()
        with pytest.raises(RuntimeError, match="invalid device ordinal"):
            host.to("cuda:1")
        model = gpucourse.SmallCNN(width=4).to("cuda")
        assert {p.device.type for p in model.parameters()} == {"cuda"}
        with pytest.raises(RuntimeError, match="same device"):
            model(torch.rand(2, 3, 32, 32))  # the input left on the host
        assert r.gpus == 1
    assert not torch.cuda.is_available() and host.to("cpu") is host  # all undone


def test_what_synchronizes_and_from_which_line():
    with Rehearsal("t4") as r:
        cell = {"torch": torch, "batch": torch.ones(4).to("cuda"), "host": torch.ones(4)}
        lines = "\n".join(
            [
                "host.to('cuda')",  # 1: a blocking copy to the device
                "host.to('cuda', non_blocking=True)",  # 2: an asynchronous one: no wait
                "batch.sum().item()",  # 3: a read
                "batch.tolist(); bool(batch[0])",  # 4: two reads
                "batch[batch > 1]",  # 5: a boolean mask: the result's size is on the device
                "batch.nonzero()",  # 6
                "torch.tensor([1.0, 2.0], device='cuda')",  # 7: built on the host, then copied
                "batch.cpu()",  # 8: a blocking copy back
                "batch * 2; batch.to('cuda'); torch.zeros(3, device='cuda')",  # 9: none
                "torch.cuda.synchronize()",  # 10: waits, reported by no warning (device_sync)
            ]
        )
        syncs = reported(r, lines, cell)
    assert [line for _, line in syncs] == [1, 3, 4, 4, 5, 6, 7, 8]
    assert {file for file, _ in syncs} == {"<cell>"} and r.syncs.explicit == 1


def test_a_non_blocking_copy_from_pageable_memory_is_a_wait_cuda_does_not_report():
    """Counted apart (``syncs.staged``), never reported: set_sync_debug_mode sees none of them. A
    non-blocking copy back to the host lands in pinned memory, as PyTorch's ``_to_copy`` makes."""
    with Rehearsal("t4") as r:
        host, pinned, batch = torch.ones(4), torch.ones(4).pin_memory(), torch.ones(4).to("cuda")
        torch.cuda.set_sync_debug_mode("error")  # a reported synchronization would raise
        host.to("cuda", non_blocking=True)  # pageable: staged
        batch.copy_(host, non_blocking=True)  # pageable: staged
        host.cuda(non_blocking=True)  # pageable: staged
        back = batch.to("cpu", non_blocking=True)  # into pinned memory (_to_copy's pin_out)
        pinned.to("cuda", non_blocking=True)  # pinned: runs ahead
        back.to("cuda", non_blocking=True)
        batch.copy_(pinned, non_blocking=True)
        loader = torch.utils.data.DataLoader(torch.ones(8, 2), batch_size=4, pin_memory=True)
        for rows in loader:
            rows.to("cuda", non_blocking=True)  # the loader's pinned batches run ahead
        torch.cuda.set_sync_debug_mode(0)
    assert (r.syncs.staged, len(r.syncs)) == (3, 1)  # the one blocking copy made `batch`


def test_module_to_copies_each_parameter_from_torchs_own_line():
    with Rehearsal("h100") as r:
        gpucourse.SmallCNN(width=8).to("cuda")
    files = {file.replace("\\", "/") for file, _ in r.syncs.reported}
    assert len(r.syncs) == 11 and files == {torch.nn.Module.to.__code__.co_filename}


def test_reported_through_set_sync_debug_mode_as_cuda_reports_it():
    with Rehearsal("t4"):
        batch = torch.ones(3).to("cuda")
        batch.sum().item()  # default mode: nothing said
        torch.cuda.set_sync_debug_mode("warn")
        with pytest.warns(UserWarning, match=SYNC_MESSAGE) as caught:
            batch.sum().item()
        assert caught[0].filename == __file__  # this line, not the rehearsal's
        torch.cuda.set_sync_debug_mode("error")
        with pytest.raises(RuntimeError, match=SYNC_MESSAGE):
            batch.sum().item()
        torch.cuda.set_sync_debug_mode(0)


@pytest.mark.parametrize("warnings_module", ["warnings", "_py_warnings"])
def test_a_frame_walker_sees_the_callers_line_next_to_the_warnings_module(warnings_module):
    """On CUDA no Python frame sits between the line and the warnings machinery; a referee that
    walks frames past the warnings module's finds the line. On Python 3.14 that module is
    _py_warnings (the gap ``py314-warnings``): a walker that knows only "warnings" stops early."""
    seen = []

    def walker(message, category, filename, lineno, file=None, line=None):
        frame = sys._getframe(1)
        while frame.f_globals.get("__name__") == "warnings":
            frame = frame.f_back
        seen.append((frame.f_globals.get("__name__"), (filename, lineno) == (__file__, here)))

    gaps = ("py314-warnings",) if warnings_module == "_py_warnings" else ()
    with Rehearsal("t4", gaps=gaps), warnings.catch_warnings():
        warnings.simplefilter("always")
        warnings.showwarning = walker
        batch = torch.ones(3).to("cuda")
        torch.cuda.set_sync_debug_mode("warn")
        here = sys._getframe().f_lineno + 1
        batch.sum().item()
        torch.cuda.set_sync_debug_mode("default")
    assert seen == [(__name__ if warnings_module == "warnings" else "_py_warnings", True)]


def test_machines_as_rented():
    with Rehearsal("t4"):
        facts = gpucourse.device_facts("cuda")
        assert (facts.name, facts.compute_capability, facts.bf16) == ("Tesla T4", (7, 5), False)
        assert gpucourse.amp_dtype(facts) == (torch.float16, True)  # lesson 04's rule on a T4
        assert gpucourse.loaders.num_workers() == 1  # Colab's 2 vCPUs, one left for the loop
    with parse("h100:8") as r:
        assert torch.cuda.device_count() == 8 and torch.ones(1, device="cuda:7").device.index == 7
        assert gpucourse.device_facts("cuda:7").processors == 132 and r.machine.cpus == 16
    with pytest.raises(ValueError, match="one of t4"):
        Rehearsal("v100")


def test_gaps_a_machine_has():
    with Rehearsal("l4", gaps=("dali", "tensorflow", "rapids")):
        for module in ("nvidia.dali", "tensorflow", "cudf"):
            with pytest.raises(ImportError):
                __import__(module)
        assert gpucourse.import_dali() is None
    with Rehearsal("t4", gaps=("colab-pandas",)):
        assert "pandas" in sys.modules
    with Rehearsal("h100", gaps=("compiler",)):
        assert shutil.which("gcc") is None and shutil.which("cc") is None and shutil.which("ls")


def test_a_training_step_runs_as_on_cuda():
    """AMP on a T4 (fp16 and a GradScaler, whose step reads found_inf), fused Adam (no read),
    pinned batches copied without waiting."""
    torch.manual_seed(0)
    with Rehearsal("t4") as r:
        model = gpucourse.SmallCNN(width=4).to("cuda")
        scaler = torch.amp.GradScaler("cuda")
        for fused in (False, True):
            optimizer = torch.optim.Adam(model.parameters(), fused=fused)
            images = torch.rand(4, 3, 32, 32).pin_memory().to("cuda", non_blocking=True)
            labels = torch.tensor([0, 1, 2, 3]).pin_memory().to("cuda", non_blocking=True)
            before = len(r.syncs)
            with torch.autocast("cuda", dtype=torch.float16):
                logits = model(images)
            assert logits.dtype == torch.float16 and logits.device.type == "cuda"
            scaler.scale(torch.nn.functional.cross_entropy(logits, labels)).backward()
            scaler.step(optimizer)
            scaler.update()
            assert len(r.syncs) - before == (0 if fused else 1)  # GradScaler's .item()


def test_other_devices_are_left_alone():
    with Rehearsal("t4"):
        on_meta = torch.ones(2).to("cuda").to("meta")
        assert on_meta.device.type == "meta" and torch.zeros(2, device="meta").device.type == "meta"
        assert torch.ones(1).cuda(0).device.index == 0 and torch.ones(1).cuda().is_cuda


def test_what_it_cannot_model_says_so():
    with Rehearsal("t4"):
        with pytest.raises(NotImplementedError, match="not modelled by the CUDA rehearsal"):
            torch.cuda.max_memory_allocated()
        model = gpucourse.SmallCNN(width=4)
        assert torch.compile(model) is model  # compiling: the code runs as written
