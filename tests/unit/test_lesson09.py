"""Lesson 09's referee on a CPU: the cells its tests and class table judge with, from the solution.

The definitions (`spy`, `Watch`, `BatchLog`, the read detectors, the tests' `check_settings` and
`first_difference`) are compiled from the solution notebook's own cells, so these tests pin the
code learners are graded by. What only a GPU does comes from the CUDA rehearsal
(`coursetools.rehearsal`): `set_sync_debug_mode`, and the synchronizations it reports from the line
that made them.

Exercise 4's test cell runs here whole, against one baseline per device, for the mistakes of its
evaluation and model: the GPU-only ones in tests/fixtures/09_make_it_fast/cuda/, and those a CPU
grader catches in tests/fixtures/09_make_it_fast/in_process/, judged in this process rather than
by a notebook run each.
"""

from __future__ import annotations

import ast
import contextlib
import re
import sys
import warnings
from types import SimpleNamespace

import coursekit as ck
import pytest
import torch
from coursetools import rehearsal
from coursetools.grading import referee, rows

import gpucourse
from gpucourse.device import DeviceFacts

LESSON = "09_make_it_fast"


def cell(grade_id: str) -> str:
    (found,) = [
        c.source
        for c in ck.read(ck.solution_path(LESSON)).cells
        if c.metadata.get("nbgrader", {}).get("grade_id") == grade_id
    ]
    return found


def definitions(grade_id: str, namespace: dict, *names: str) -> dict:
    """Compile only the named top-level functions and classes of a cell (no statement runs) into
    `namespace`, a notebook's __main__."""
    tree = ast.parse(cell(grade_id))
    keep = [
        n for n in tree.body if isinstance(n, ast.FunctionDef | ast.ClassDef) and n.name in names
    ]
    assert {n.name for n in keep} == set(names), f"{grade_id} defines {[n.name for n in keep]}"
    exec(compile(ast.Module(keep, type_ignores=[]), f"<{grade_id}>", "exec"), namespace)
    return namespace


REFEREE = ("reads", "reads_to_host", "mask_index", "staged_copy", "spy", "watch", "batch_log")


NOTEBOOKS = []  # each test's namespaces: their BatchLog hooks are removed after the test


@pytest.fixture(autouse=True)
def _remove_batch_log_hooks():
    """BatchLog registers its two global hooks once per kernel; here a test is a kernel."""
    yield
    for namespace in NOTEBOOKS:
        for hook in namespace["BatchLog"].hooks:
            hook.remove()
    NOTEBOOKS.clear()


def notebook(device: str = "cpu") -> dict:
    """A __main__ namespace holding the lesson's referee cells, on `device`."""
    namespace = {"__name__": "__main__", "torch": torch, "gpucourse": gpucourse, "sys": sys}
    namespace["DeviceFacts"] = DeviceFacts
    exec(cell("imports"), namespace)
    namespace["device"] = torch.device(device)
    for grade_id in REFEREE:
        exec(cell(grade_id), namespace)
    NOTEBOOKS.append(namespace)
    return namespace


def run_as(module: str, source: str, namespace: dict):
    """Run `source` as if it were a line of the module named `module` ("__main__": the notebook)."""
    exec(compile(source, f"<{module}>", "exec"), {**namespace, "__name__": module})


def test_the_referee_cells_are_locked():
    locked = {
        c.metadata.nbgrader.grade_id
        for c in ck.read(ck.student_path(LESSON)).cells
        if c.metadata.get("nbgrader", {}).get("locked")
    }
    referee = {
        "slow_evaluate",
        "slow_train",
        "reads",
        "staged_copy",
        "spy",
        "watch",
        "timed",
        "batch_log",
        "baseline",
    }
    assert referee | {"decoded", "measure_speedup", "workload", "model_sizes", "data"} <= locked


def test_the_measuring_cell_prints_the_line_the_class_table_reads():
    """On new images (nothing remembered), with the compiler's caches cleared, both programs logged,
    the ratio printed only for the same batches, in the line the class table parses."""
    source = cell("measure_speedup")
    line = 'print(f"fast_train speed-up over the baseline: {speedup:.2f}x (one run: indicative)")'
    assert line in source and "if same:" in source
    assert rows.SPEEDUP.search("fast_train speed-up over the baseline: 1.23x (one run: indicative)")
    assert "timed(slow_train, fresh, fresh_test" in source and "timed(fast_train, fresh," in source
    assert source.count("with BatchLog()") == 2
    assert source.startswith("torch.compiler.reset()")  # a compiled program compiles again here


def test_reads_to_host_and_mask_index():
    nb = notebook()
    on_cpu = torch.zeros(3)
    assert nb["reads_to_host"](on_cpu, "cpu") and nb["reads_to_host"](on_cpu, device="cpu:0")
    assert not nb["reads_to_host"](on_cpu, torch.device("cpu"))  # .to(device) on a CPU: no read
    assert not nb["reads_to_host"](on_cpu, torch.float32) and not nb["reads_to_host"](on_cpu)
    meta = torch.zeros(3, device="meta")  # a tensor elsewhere, copied to the CPU: a read
    assert nb["reads_to_host"](meta, torch.device("cpu"))
    mask = on_cpu > 0
    assert nb["mask_index"](on_cpu, mask) and nb["mask_index"](on_cpu, (slice(None), mask))
    assert not nb["mask_index"](on_cpu, torch.tensor([0, 1])) and not nb["mask_index"](on_cpu, 0)


def test_watch_counts_hidden_reads_of_this_notebook_only():
    nb = notebook()
    with nb["Watch"]() as watch:
        run_as(
            "__main__",
            "x = torch.arange(4.0)\nx[x > 1].sum()\nx.to('cpu')\nx.to(device)\n"
            "float(x[0])\nx.tolist()",
            nb,
        )
        run_as("torch.fake_library", "y = torch.arange(4.0)\ny.tolist()\ny[y > 1]\ny.item", nb)
    assert (
        watch.reads == 4
    )  # mask, .to("cpu"), float(), .tolist(); not .to(device), not the library's
    assert torch.Tensor.to is not None and "wrapper" not in torch.Tensor.tolist.__qualname__


def test_watch_on_cuda_counts_synchronizations_and_tells_whose():
    """On the rehearsed CUDA path: the notebook's blocking copy and read are its own syncs, a
    library's are counted but not its own; torch.cuda.synchronize() waits without a warning (as on
    CUDA) and the spy counts it as a read; the notebook's non-blocking copies to the GPU from
    pageable memory (`.to`, `.cuda`, `copy_`), which PyTorch does not report, are waits of its own,
    and from pinned memory none; other warnings are shown."""
    with rehearsal.Rehearsal("t4") as r:
        nb = notebook("cuda")
        with pytest.warns(UserWarning, match="something else"), nb["Watch"]() as watch:
            mine = "x = torch.ones(3).to(device)\nx.sum().item()\ntorch.cuda.synchronize()"
            run_as("__main__", mine, nb)
            run_as("torch.amp.fake_scaler", "y = torch.ones(3).to(device)\ny.sum().item()", nb)
            run_as("__main__", "warnings.warn('something else')", nb)
            staged = "z = torch.ones(3).to(device, non_blocking=True)\nz.copy_(torch.ones(3), True)"
            pinned = "torch.ones(3).pin_memory().cuda(non_blocking=True)"
            run_as("__main__", f"{staged}\n{pinned}\ntorch.ones(3).cuda(0, True)", nb)
            assert torch.cuda.get_sync_debug_mode() == 1  # "warn" while watching
        assert torch.cuda.get_sync_debug_mode() == 0
    assert (watch.syncs, watch.own_syncs, watch.reads, watch.staged) == (7, 5, 2, 3)
    assert len(r.syncs) == 4 and r.syncs.staged == 3  # PyTorch reports none of the staged copies
    assert "wrapper" not in torch.cuda.synchronize.__qualname__  # the spy is gone
    assert "wrapper" not in torch.Tensor.copy_.__qualname__


@pytest.mark.parametrize("machine", [None, "t4"])
def test_watch_counts_the_waits_pytorch_does_not_report(machine):
    """An Event's synchronize() (cudaEventSynchronize) and torch.cuda.empty_cache() (cudaFree) wait
    for the GPU, and set_sync_debug_mode reports neither (c10/cuda/CUDAFunctions.h warns in
    memcpy_and_sync and stream_synchronize alone): the spies count this notebook's as waits of its
    own, a library's not. empty_cache is counted on every device, so a grade does not depend on
    the grader's (on a CPU it does nothing); the events only exist on CUDA."""
    with rehearsal.parse(machine) if machine else contextlib.nullcontext() as r:
        nb = notebook("cuda" if machine else "cpu")
        mine = "torch.cuda.empty_cache()"
        if machine:
            mine += "\nend = torch.cuda.Event(enable_timing=True)\nend.record()\nend.synchronize()"
        with nb["Watch"]() as watch:
            run_as("__main__", mine, nb)
            run_as("torch.fake_library", mine, nb)
        reported = len(r.syncs) if machine else 0
    waits = 2 if machine else 1
    assert (watch.syncs, watch.own_syncs, watch.reads, watch.staged) == (waits, waits, 0, 0)
    assert reported == 0  # neither is reported by PyTorch: only the spies see them
    assert "wrapper" not in torch.cuda.empty_cache.__qualname__  # the spies are gone
    assert "wrapper" not in torch.cuda.Event.synchronize.__qualname__


def test_batch_log_records_each_pass_once_with_autograd_and_start():
    nb = notebook()
    torch.manual_seed(0)
    model = gpucourse.SmallCNN(width=4)
    images = torch.rand(5, 3, 32, 32)
    with nb["BatchLog"]() as log:
        model(images)
        with torch.no_grad():
            model(images[:2])
    assert [grad for grad, _ in log.calls] == [True, False]
    (training,) = log.training()
    assert torch.allclose(training, images.double().flatten(1).sum(1))
    start = torch.stack([p.double().sum() for p in model.parameters()])
    assert torch.equal(log.start, start)
    (logits,) = log.training_logits()
    assert torch.equal(logits, model(images).detach())
    hooks = dict(torch.nn.modules.module._global_forward_pre_hooks)
    with nb["BatchLog"]() as again:
        model(images)
    assert len(log.calls) == 2 and len(again.calls) == 1  # a log records within its block only
    assert dict(torch.nn.modules.module._global_forward_pre_hooks) == hooks  # registered once


@pytest.mark.parametrize("compiled", ["model", "step"])
def test_batch_log_sees_each_compiled_pass_once(compiled):
    """A compiled model, or a whole compiled training step: one record per pass (the recorder runs
    eagerly, torch.compiler.disable), and the model's forward still compiles (the hooks Dynamo
    traces are plain Python that calls the recorder for the SmallCNN alone). A later log compiles
    nothing again: Dynamo guards on the global hooks' keys, so hooks registered for each log made
    it recompile each time, until its recompile limit left the model eager."""
    nb = notebook()
    torch._dynamo.reset()
    graphs = []  # the operations in each graph Dynamo captured

    def counting(graph_module, example_inputs):
        graphs.append(
            sum(n.op == "call_module" or n.op == "call_function" for n in graph_module.graph.nodes)
        )
        return graph_module.forward

    model = gpucourse.SmallCNN(width=4)
    if compiled == "model":
        model = torch.compile(model, backend=counting)

    def step(images):
        model(images).sum().backward()

    step = torch.compile(step, backend=counting) if compiled == "step" else step
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # compiling with global hooks on warns about them
        with nb["BatchLog"]() as log:
            for _ in range(3):
                step(torch.rand(4, 3, 32, 32))
        compiled_once = len(graphs)
        for _ in range(3):
            with nb["BatchLog"]() as later:
                step(torch.rand(4, 3, 32, 32))
    assert len(log.training()) == 3 and all(len(sums) == 4 for sums in log.training())
    assert graphs and max(graphs) >= 10, f"the model's forward compiled whole, not eager: {graphs}"
    assert len(later.training()) == 1 and len(graphs) == compiled_once, graphs


@pytest.mark.parametrize(
    "change, message",
    [
        ({"dtype": torch.float16, "scaler": True}, "fp32 or"),
        ({"dtype": torch.bfloat16, "scaler": True}, "iff fp16"),
        ({"num_workers": 99, "persistent_workers": True}, "from 0 to 8"),
        ({"num_workers": -1, "persistent_workers": True}, "from 0 to 8"),
        ({"num_workers": 2.0, "persistent_workers": True}, "whole number"),
        ({"num_workers": 0, "persistent_workers": True}, "persistent iff workers"),
    ],
)
def test_check_settings_fails_inconsistent_settings_on_a_cpu(change, message, monkeypatch):
    monkeypatch.setattr("os.cpu_count", lambda: 2)  # the course's grader: 99 workers is too many
    nb = definitions("test_fast_settings", notebook(), "check_settings", "fake_facts")
    cpu = nb["fake_facts"]("cpu")
    right = {"dtype": torch.float32, "scaler": False, "pin_memory": False, "non_blocking": False}
    right |= {"num_workers": 0, "persistent_workers": False, "cudnn_benchmark": False}
    nb["check_settings"](right, cpu)
    nb["check_settings"]({**right, "dtype": torch.bfloat16}, cpu)  # lesson 04's type: also right
    with pytest.raises(AssertionError, match=message):
        nb["check_settings"]({**right, **change}, cpu)


def test_check_settings_on_a_t4_wants_fp16_with_a_scaler_or_fp32_and_async_copies():
    nb = definitions("test_fast_settings", notebook(), "check_settings", "fake_facts")
    t4 = nb["fake_facts"]("cuda:0", (7, 5))
    right = {"dtype": torch.float16, "scaler": True, "pin_memory": True, "non_blocking": True}
    right |= {"num_workers": 0, "persistent_workers": False, "cudnn_benchmark": True}
    nb["check_settings"](right, t4)
    nb["check_settings"]({**right, "dtype": torch.float32, "scaler": False}, t4)
    nb["check_settings"]({**right, "cudnn_benchmark": False}, t4)  # the learner's measurement
    with pytest.raises(AssertionError, match="True or False"):
        nb["check_settings"]({**right, "cudnn_benchmark": None}, t4)
    for wrong in ({"dtype": torch.bfloat16, "scaler": False}, {"non_blocking": False}):
        with pytest.raises(AssertionError):
            nb["check_settings"]({**right, **wrong}, t4)


@pytest.mark.parametrize("machine", [None, "t4", "h100:8"])
def test_exercise_2_keeps_its_points_with_cudnn_benchmark_off(machine):
    """Ex.2's whole test cell against in_process/right_benchmark_off (cudnn.benchmark off on every
    GPU, as the H200 run measured faster) and the solution, on this CPU and the rehearsed CUDA path:
    the fake GPUs' facts are checked on every grader, so both keep their points everywhere."""
    for name in ("in_process/right_benchmark_off", "solution"):
        with rehearsal.parse(machine) if machine else contextlib.nullcontext():
            nb = notebook("cuda" if machine else "cpu")
            nb["facts"] = gpucourse.device_facts(nb["device"])
            source = f"{answer_of(name, 'fast_settings')}\n{cell('test_fast_settings')}"
            exec(compile(source, "<__main__>", "exec"), nb)  # nb is a notebook's __main__
            assert nb["fast_settings"](nb["facts"])["cudnn_benchmark"] == (
                machine is not None and name == "solution"
            )


@pytest.mark.parametrize("machine", [None, "t4", "h100:8"])
def test_exercise_2_does_not_depend_on_the_graders_cores(machine):
    """Ex.2's whole test cell against right_reads_through_the_host's settings, four workers on
    every GPU (the tutorials' count), on this CPU, a rehearsed T4 (2 vCPUs: num_workers() is 1) and
    an H100: any count from 0 to 8 keeps the points, whatever the grader's cores."""
    with rehearsal.parse(machine) if machine else contextlib.nullcontext():
        nb = notebook("cuda" if machine else "cpu")
        nb["facts"] = gpucourse.device_facts(nb["device"])
        source = f"{answer_of('right_reads_through_the_host', 'fast_settings')}\n"
        exec(compile(source + cell("test_fast_settings"), "<__main__>", "exec"), nb)
        t4 = nb["fake_facts"]("cuda:0", (7, 5))
        assert nb["fast_settings"](t4)["num_workers"] == 4
        if machine == "t4":
            assert gpucourse.loaders.num_workers() == 1  # what the old rule allowed


def test_first_difference_names_what_changed():
    nb = definitions("test_fast_train", notebook(), "first_difference")
    batches = [torch.arange(16.0) + 100 * step for step in range(4)]
    assert nb["first_difference"](list(batches), batches) is None
    assert nb["first_difference"]([b + 1e-4 for b in batches], batches) is None  # rounding
    assert "batch size" in nb["first_difference"]([torch.arange(64.0)], batches)
    assert "RandomSampler" in nb["first_difference"]([batches[1], batches[0]], batches)
    assert "epochs" in nb["first_difference"](batches[:3], batches)
    assert "no_grad" in nb["first_difference"](batches + [torch.ones(16)], batches)


@pytest.mark.parametrize("machine", [None, "t4", "t4:1:py314-warnings", "h100:8"])
def test_a_sync_only_a_gpu_sees_costs_exercise_3_on_cuda_alone(machine):
    """Ex.3's whole test cell against the GPU-only mistake (cuda/syncs_through_nonzero), the
    solution and accumulators made by `torch.tensor(0.0, device=)` (in_process/
    right_tensor_accumulators): a CPU grader cannot see the mistake; on the rehearsed CUDA path
    (Python 3.14's warnings module too) it costs Ex.3. The right answers pass: the two blocking
    copies of the accumulators are waits of their own, once, before the loop, and the test judges
    waits that grow with the steps."""
    test_cell = cell("test_fast_epoch")
    answers = [("cuda/syncs_through_nonzero", True), ("solution", False)]
    answers += [("cuda/times_each_step_with_events", True)]
    answers += [("in_process/right_tensor_accumulators", False)]
    for name, wrong in answers:
        with rehearsal.parse(machine) if machine else contextlib.nullcontext():
            nb = notebook("cuda" if machine else "cpu")
            nb.update(lr=2e-3, F=torch.nn.functional, facts=gpucourse.device_facts(nb["device"]))
            source = f"{answer_of(name, 'fast_epoch')}\n{test_cell}"
            if wrong and machine:
                with pytest.raises(AssertionError, match="synchronizations of your own in 3 steps"):
                    run_as("__main__", source, nb)
            else:
                run_as("__main__", source, nb)


@pytest.mark.parametrize("machine", [None, "t4"])
def test_exercise_3_judges_the_reads_that_grow_with_the_steps(machine):
    """Ex.3's whole test cell: reads after the loop written other ways keep the points though the
    referee counts two (`sums.cpu().tolist()`: a copy, then a list of a host tensor; two `.item()`
    calls), as does an epoch in the channels-last layout; a read in every step
    (copies_to_host's `.to("cpu")`) still loses them, on a CPU and the rehearsed CUDA path."""
    right = {"right_reads_through_the_host": 2, "in_process/right_two_items": 2}
    right |= {"in_process/right_channels_last": 1}
    for name, reads in [*right.items(), ("copies_to_host", None)]:
        with rehearsal.parse(machine) if machine else contextlib.nullcontext():
            nb = notebook("cuda" if machine else "cpu")
            nb.update(lr=2e-3, F=torch.nn.functional, facts=gpucourse.device_facts(nb["device"]))
            source = f"{answer_of(name, 'fast_epoch')}\n{cell('test_fast_epoch')}"
            if reads is None:
                with pytest.raises(AssertionError, match="reads that grow with the steps"):
                    run_as("__main__", source, nb)
                continue
            namespace = {**nb, "__name__": "__main__"}
            exec(compile(source, "<__main__>", "exec"), namespace)
            assert namespace["once"].reads == reads, (name, namespace["once"].reads)


def test_exercise_3_compares_the_twins_in_plain_fp32_and_restores_tf32():
    """The fp32 parity of Ex.3 does not depend on TF32 (on from an A100 on for cuDNN
    convolutions, and another layout picks other kernels): the plain loop and the learner's epoch
    train with both switches at "ieee"; the mixed-precision run after them, and the kernel after
    the cell, find the switches as they were."""
    backends = torch.backends
    switches = [(backends.cudnn.conv, "fp32_precision"), (backends.cuda.matmul, "fp32_precision")]
    before = [getattr(owner, name) for owner, name in switches]
    seen = []
    try:
        for owner, name in switches:
            setattr(owner, name, "tf32")  # as a learner's kernel may have them
        nb = notebook()
        nb.update(lr=2e-3, F=torch.nn.functional, facts=gpucourse.device_facts(nb["device"]))
        namespace = {**nb, "__name__": "__main__"}
        exec(compile(answer_of("solution", "fast_epoch"), "<__main__>", "exec"), namespace)
        epoch = namespace["fast_epoch"]

        def recording(*args):
            seen.append(tuple(getattr(owner, name) for owner, name in switches))
            return epoch(*args)

        namespace["fast_epoch"] = recording
        exec(compile(cell("test_fast_epoch"), "<__main__>", "exec"), namespace)
        after = [getattr(owner, name) for owner, name in switches]
    finally:
        for (owner, name), value in zip(switches, before, strict=True):
            setattr(owner, name, value)
    assert seen[:2] == [("ieee", "ieee")] * 2, seen  # once, and the 3 steps the twin matches
    assert seen[2:] and set(seen[2:]) == {("tf32", "tf32")}, seen
    assert after == ["tf32", "tf32"]


@pytest.mark.parametrize("name", ["weights_loss_per_sample", "accuracy_over_full_batches"])
def test_exercise_3_averages_as_slow_train_over_an_uneven_last_batch(name):
    """Ex.3's whole test cell on a CPU: its batches are 16, 16 and 8 images, so a loss weighted by
    each batch's size, or an accuracy over steps x batch size, differs from slow_train's (with
    equal batches both matched it exactly and kept Ex.3's points). The right answers' pass is
    test_a_sync_only_a_gpu_sees_costs_exercise_3_on_cuda_alone's."""
    nb = notebook()
    nb.update(lr=2e-3, F=torch.nn.functional, facts=gpucourse.device_facts(nb["device"]))
    source = f"{answer_of(f'in_process/{name}', 'fast_epoch')}\n{cell('test_fast_epoch')}"
    with pytest.raises(AssertionError, match="the same numbers as a plain loop"):
        run_as("__main__", source, nb)


# The cells Exercise 4's test relies on, after the referee's: the experiment, the baseline's run
# (the reference answers of Exercises 2 and 3 beside it) and the locked `decoded`.
BEFORE_EXERCISE_4 = ("workload", "model_sizes", "data", "slow_evaluate", "slow_train", "timed")
BEFORE_EXERCISE_4 += ("baseline", "fast_settings", "fast_epoch", "decoded")


def answer_of(name: str, grade_id: str = "fast_train") -> str:
    """An answer cell of the solution, or of a fixture ("right_compiled_step",
    "cuda/casts_the_weights", "in_process/reads_every_batch")."""
    if name == "solution":
        return cell(grade_id)
    folder, _, stem = name.rpartition("/")
    found = ck.fixtures(LESSON, cuda=folder == "cuda") if folder != "in_process" else in_process()
    (fixture,) = [f for f in found if f.name == stem]
    return fixture.answers[grade_id]


def in_process() -> list[ck.Fixture]:
    """tests/fixtures/09_make_it_fast/in_process/: answers judged by this file's tests alone, cells
    separated by `# %% <grade_id>` lines as in the graded fixtures."""
    found = []
    for path in sorted((ck.FIXTURES / LESSON / "in_process").glob("*.py")):
        parts = re.split(r"^# %% (\S+)[^\n]*\n", path.read_text(), flags=re.M)
        sections = zip(parts[1::2], parts[2::2], strict=True)
        answers = {grade_id: source.strip("\n") for grade_id, source in sections}
        found.append(ck.Fixture(LESSON, path.stem, answers))
    return found


def exercise_4(machine: str | None, names, monkeypatch) -> dict:
    """Each named fast_train under Exercise 4's whole test cell, at nbgrader's sizes but for one
    epoch (what these tests judge does not depend on the epochs), on this CPU or the rehearsed
    `machine`, against one baseline: {name: None if it passes, else its failure}."""
    monkeypatch.setenv("NBGRADER_EXECUTION", "autograde")
    failures = {}
    with rehearsal.parse(machine) if machine else contextlib.nullcontext():
        nb = notebook("cuda" if machine else "cpu")
        for grade_id in BEFORE_EXERCISE_4:
            exec(cell(grade_id), nb)
            if grade_id == "workload":
                nb["epochs"] = 1
        for name in names:
            try:
                run_as("__main__", f"{answer_of(name)}\n{cell('test_fast_train')}", nb)
                failures[name] = None
            except Exception as error:  # noqa: BLE001 (a failed test cell, whatever it raised)
                failures[name] = f"{type(error).__name__}: {error}"
    return failures


def test_exercise_4_on_a_cpu(monkeypatch):
    """On a CPU grader: an accuracy counted on the training folder, a tensor for an accuracy and a
    read per batch (one test batch at grading sizes hides it; the test's own evaluation of the
    training folder shows it) each fail Ex.4 with a message that names the mistake. The GPU-only
    mistakes keep their marks here (the solution's are test_grading.py's)."""
    wrong = {
        "in_process/reports_training_accuracy": "the accuracy is test_root's",
        "in_process/accuracy_as_a_tensor": "the accuracy is a Tensor: return a Python float",
        "in_process/reads_every_batch": "2 reads from the device to evaluate 4x the images, not 1",
        "in_process/loss_with_label_smoothing": "F.cross_entropy of your model's logits",
        "in_process/empties_the_cache": "synchronizations of your own to evaluate 4x the images",
    }
    right = ["cuda/trains_on_the_host", "cuda/casts_the_weights", "cuda/blocks_in_evaluation"]
    right += ["right_reads_through_the_host"]  # right.cpu().item(): two reads, however many batches
    failures = exercise_4(None, [*right, *wrong], monkeypatch)
    assert {name: failures[name] for name in right} == dict.fromkeys(right), failures
    for name, message in wrong.items():
        assert message in (failures[name] or ""), (name, failures[name])


def test_exercise_4_on_a_t4(monkeypatch):
    """On the rehearsed CUDA path: a model left on the host, weights cast to fp16 instead of
    autocast, blocking copies in the evaluation (two waits a batch), non-blocking copies from
    pageable memory (waits PyTorch does not report) and a GradScaler turned off under fp16 each
    fail Ex.4 with a message that names the mistake. Right evaluations keep their marks: one that
    copies with `.cuda(non_blocking=True)` and reads `.item()` once after dividing on the device,
    the compiled step's, which reads with `float()`, and one that reads with `.cpu().item()`, two
    reads for one batch as for four (the solution's are
    test_cuda_rehearsal.py's)."""
    wrong = {
        "cuda/trains_on_the_host": "the model's weights are on cpu, not cuda",
        "cuda/casts_the_weights": "weights in {torch.float16}: keep them in fp32",
        "cuda/blocks_in_evaluation": "synchronizations of your own to evaluate 4x the images",
        "cuda/unpinned_batches": "non-blocking copies from pageable memory",
        "cuda/scaler_off": "a GradScaler made with enabled=False",
    }
    right = ["in_process/right_cuda_copies", "right_compiled_step", "right_reads_through_the_host"]
    failures = exercise_4("t4", [*right, *wrong], monkeypatch)
    assert {name: failures[name] for name in right} == dict.fromkeys(right), failures
    for name, message in wrong.items():
        assert message in (failures[name] or ""), (name, failures[name])


def test_no_answer_judged_in_process_is_flagged():
    """As test_referee.py checks of the graded fixtures: these patch nothing the referee uses."""
    student, answers = ck.read(ck.student_path(LESSON)), ck.solution_answers(LESSON)
    for fixture in in_process():
        assert not referee.flags(ck.submission_from(student, {**answers, **fixture.answers}))


def gpu_check(title: str) -> str:
    return ck.gpu_check(LESSON, f"GPU check: {title}")


@pytest.mark.parametrize(
    "title, measured, broken",
    [
        # the model's 11 copies, 2 .tolist() and an .item() (the rehearsal's count at grading sizes)
        # against a loop that reads every one of its 64 steps
        ("fast_train synchronizes a few", {"fast_time": {"syncs": 14}}, {"syncs": 11 + 64 + 3}),
        # the claim's arithmetic for a T4 (about 0.4: decodes, collations, worker start-ups; the
        # bound 0.6) against a program that still decodes every epoch (about 1)
        ("decoding once cuts", {"fast_time": {"input": 0.4}}, {"input": 1.0}),
    ],
)
def test_the_sync_and_input_claims_hold_for_the_fix_and_fail_for_the_fault(
    title, measured, broken, monkeypatch, tmp_path
):
    monkeypatch.setenv("GPUCOURSE_REQUIRE_GPU", "1")
    monkeypatch.setenv("GPUCOURSE_CLAIMS", str(tmp_path / "claims.jsonl"))
    nb = {"gpucourse": gpucourse, "device": torch.device("cuda:0"), "epochs": 2, "train_steps": 64}
    nb |= {"baseline": {"model": gpucourse.SmallCNN(width=8)}, "slow_time": {"input": 1.0}}
    exec(gpu_check(title), {**nb, **measured})
    with pytest.raises(RuntimeError, match="GPU claim failed"):
        exec(gpu_check(title), {**nb, "fast_time": broken})


def test_the_profiler_cell_counts_the_gpus_busy_time_once():
    """The profiled epoch's summary on a GPU: the busy time sums the GPU's own rows (kernels and
    copies), not the operators' device time beside them (`aten::copy_` would count each copy
    twice) nor the GPU's copies of annotated ranges; on a CPU it says there is no GPU."""
    from torch.autograd import DeviceType

    cpu, gpu, loader = DeviceType.CPU, DeviceType.CUDA, "enumerate(DataLoader)#_Iter.__next__"
    rows = [  # key, device type, self device us, annotation, cpu total us, count (H200-like)
        ("aten::copy_", cpu, 1143.0, False, 0.0, 535),
        ("Memcpy HtoD (Pageable -> Device)", gpu, 1132.0, False, 0.0, 17),
        ("void at::native::max_pool_forward", gpu, 198.0, False, 0.0, 12),
        ("Optimizer.step#Adam.step", gpu, 2500.0, True, 0.0, 1),
        (loader, cpu, 0.0, False, 141_000.0, 9),
        ("aten::_local_scalar_dense", cpu, 0.0, False, 0.0, 48),
    ]
    fields = ("key", "device_type", "self_device_time_total", "is_user_annotation")
    fields += ("cpu_time_total", "count")
    averages = [SimpleNamespace(**dict(zip(fields, r, strict=True))) for r in rows]
    prof = SimpleNamespace(key_averages=lambda: averages)
    source = ck.code_cell(LESSON, "averages = prof.key_averages()")
    for kind, line in (("cuda", "the GPU busy 1.3 ms of them (0.7%)"), ("cpu", "no GPU")):
        printed = []
        namespace = {"prof": prof, "DeviceType": DeviceType, "epoch_ms": 200.0}
        namespace |= {"device": torch.device(kind), "facts": SimpleNamespace(name=kind)}
        exec(
            source, {**namespace, "print": lambda *parts, out=printed: out.append(" ".join(parts))}
        )
        assert "200 ms, 141 ms of it in next()" in printed[0], printed
        assert line in printed[1] and "48 .item() calls" in printed[1], printed


def test_the_text_says_where_to_compile_and_the_fixtures_follow_it():
    """A CPU grader would build Inductor's C++ kernels inside Ex.4's cell (about 100 s on the
    course's 2-core machine, against nbgrader's 120 s a cell), or fail without a compiler: the text
    tells learners to compile on the GPU only or with `backend="eager"` on a CPU, quotes the
    cell's time bound as nbgrader_config sets it, and every fixture that compiles does so."""
    (text,) = [
        c.source
        for c in ck.read(ck.solution_path(LESSON)).cells
        if c.cell_type == "markdown" and "How the batches reach `fast_epoch`" in c.source
    ]
    assert '**Where to compile**: on the GPU only (`if device.type == "cuda"`)' in text
    assert 'or with `backend="eager"` on a CPU' in text
    config = (ck.ROOT / "nbgrader_config.py").read_text()
    timeout = re.search(r"c\.Execute\.timeout = (\d+)", config)
    assert timeout and f"this course gives nbgrader {timeout[1]} s a cell" in text
    compiling = [
        (f.name, source)
        for f in [*ck.fixtures(LESSON), *ck.fixtures(LESSON, cuda=True), *in_process()]
        for source in f.answers.values()
        if "torch.compile(" in source
    ]
    assert compiling, "the fixtures hold a compiled route"
    for name, source in compiling:
        assert 'device.type == "cuda"' in source and 'backend="eager"' in source, name
