"""Lesson 11's GPU checks and its counting, pinned on a CPU.

- The three claims read the NCCL run's results (``gpu_measured``, written by measure.py on two
  GPUs): FSDP's CUDA memory per rank after a step against the arithmetic (16 bytes a parameter / N),
  its peak against one replica's 16 bytes a parameter, and the bf16 all-gather bytes against
  float32's. Each passes at the value the arithmetic predicts, fails at the value the broken path
  it names would show (an unsharded model, a policy that did not apply), and records "did not run"
  where there was no NCCL run (one GPU or none) or nothing was counted; a failed one raises in
  strict mode.
- The NCCL rerun (a demo cell) cannot stop Run All: a failed launch is caught and printed,
  ``gpu_measured`` stays None, and a precondition records on CUDA that the run did not complete;
  the ranks run the learner's shard_model on gloo only.
- counting.py, run in this process on a one-rank gloo group: each storage is counted once (views
  cost nothing), and ``Traffic`` adds up the full tensor of each kind of collective, in both the
  list and the single-tensor forms.
"""

from __future__ import annotations

import inspect
import re
import sys

import coursekit as ck
import pytest
import torch
import torch.distributed as dist

import gpucourse

LESSON = "11_fsdp_sharding"
PARAMS = 34_000_000  # about the GPU run's model (width 1024, 8 blocks)
BF16 = "bf16 MixedPrecisionPolicy halves"
RESIDENT = "FSDP's memory per GPU after a step"
PEAK = "FSDP's peak per GPU stays well below"
TWO_GPUS = "two GPUs for NCCL"
COMPLETED = "the NCCL run completed"


def results(*, resident=1.02, peak=0.72, bf16=0.5, gathered=1.5 * 4 * PARAMS) -> list[dict]:
    """What measure.py writes on two NCCL ranks, in units of the arithmetic: ``resident`` x
    16 bytes a parameter / 2, ``peak`` x 16 bytes a parameter, bf16 all-gathers ``bf16`` x
    float32's."""
    zero3 = {
        "traffic": {"all-gather": gathered, "reduce-scatter": 4 * PARAMS},
        "cuda resident": resident * 16 * PARAMS / 2,
        "cuda peak": peak * 16 * PARAMS,
    }
    mixed = {"traffic": {"all-gather": bf16 * gathered, "reduce-scatter": 4 * PARAMS}}
    rank = {
        "world size": 2,
        "parameters": PARAMS,
        "stages": {"ZeRO-3": zero3},
        "FSDP options": {"bf16 MixedPrecisionPolicy": mixed},
    }
    return [rank, rank]


def check(run_cell, title: str, measured, *, strict: bool = False) -> dict:
    namespace = {"gpucourse": gpucourse, "gpu_measured": measured, "launch_device": "cuda"}
    namespace |= {"device": torch.device("cuda"), "gpus": 2}
    (record,) = run_cell(ck.gpu_check(LESSON, f"GPU check: {title}"), namespace, strict=strict)
    return record


@pytest.mark.parametrize(
    ("title", "good", "broken"),
    [
        (RESIDENT, {"resident": 1.02}, {"resident": 2.0}),  # unsharded: N times the share
        (PEAK, {"peak": 0.72}, {"peak": 1.05}),  # unsharded (one group of everything peaks
        # at about 0.63-0.75 at N = 2 and passes: the all-gather sizes, graded on gloo, catch it)
        (BF16, {"bf16": 0.5}, {"bf16": 1.0}),  # the policy did not apply: float32 gathered
    ],
)
def test_each_claim_holds_for_the_arithmetic_and_fails_for_its_broken_path(
    run_cell, title, good, broken
):
    passed = check(run_cell, title, results(**good))
    assert passed["passed"] is True and passed["device"] == "cuda", passed
    failed = check(run_cell, title, results(**broken))
    assert failed["passed"] is False, failed
    with pytest.raises(RuntimeError, match="GPU claim failed"):
        check(run_cell, title, results(**broken), strict=True)


@pytest.mark.parametrize("title", [RESIDENT, PEAK, BF16])
def test_without_the_nccl_run_each_claim_did_not_run(run_cell, title, capsys):
    record = check(run_cell, title, None, strict=True)
    assert record["measured"] is None and record["passed"] is None, record
    assert "Did not run here" in capsys.readouterr().out


def test_the_bf16_claim_does_not_divide_by_zero_when_nothing_was_gathered(run_cell):
    record = check(run_cell, BF16, results(gathered=0))
    assert record["measured"] is None and record["passed"] is None, record


def test_the_bounds_sit_between_the_right_value_and_the_broken_one():
    """Resident: the arithmetic's 1 with room for the allocator, below an unsharded 2 (N = 2);
    peak: below one replica (1), above the sharded half; bf16: around 0.5, below 1."""
    bounds = {}
    for title in (RESIDENT, PEAK, BF16):
        source = ck.gpu_check(LESSON, f"GPU check: {title}")
        bounds[title] = {w: float(v) for w, v in re.findall(r"at_(least|most)=([0-9.]+)", source)}
    assert bounds[RESIDENT] == {"least": 0.95, "most": 1.2}
    assert 0.5 < bounds[PEAK]["most"] < 1.0 and "least" not in bounds[PEAK]
    assert bounds[BF16]["least"] < 0.5 < bounds[BF16]["most"] < 1.0


def test_one_gpu_is_a_precondition_not_validated(run_cell):
    namespace = {"gpucourse": gpucourse, "device": torch.device("cuda"), "gpus": 1}
    source = ck.gpu_check(LESSON, f"GPU check: {TWO_GPUS}")
    (record,) = run_cell(source, namespace, strict=True)
    assert record["kind"] == "precondition" and record["met"] is False, record


@pytest.fixture
def one_rank(tmp_path, monkeypatch):
    """counting.py as the lesson writes it, importable, and a one-rank gloo group."""
    workdir = tmp_path / "work"
    workdir.mkdir()
    source = ck.code_cell(LESSON, "%%writefile {workdir}/counting.py")
    (workdir / "counting.py").write_text(source.split("\n", 1)[1])
    monkeypatch.syspath_prepend(str(workdir))
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        import counting

        yield counting
    finally:
        dist.destroy_process_group()
        monkeypatch.delitem(sys.modules, "counting", raising=False)


def test_counting_holds_each_storage_once_and_every_collective_whole(one_rank):
    counting = one_rank
    whole = torch.zeros(10)
    assert counting.held_bytes([whole, whole[:5], whole.view(2, 5)]) == 40  # views: nothing new
    assert counting.held_bytes([whole, torch.zeros(3, dtype=torch.bfloat16)]) == 46
    with counting.Traffic() as traffic:
        dist.all_reduce(whole)
        dist.all_gather([torch.empty(10)], whole)
        dist.reduce_scatter(torch.empty(10), [whole])
        gather_single = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
        gather_single(torch.empty(10, dtype=torch.bfloat16), whole.bfloat16())  # one tensor
    assert dict(traffic.bytes) == {"all-reduce": 40, "all-gather": 40 + 20, "reduce-scatter": 40}
    assert [dtype for _, _, dtype in traffic.log] == ["float32"] * 3 + ["bfloat16"]


def test_gloo_ranks_hide_the_gpus_before_torch_starts():
    """fully_shard's default mesh is on torch's accelerator (CUDA wherever a GPU is visible),
    not on the process group's backend: on a GPU machine (Colab's T4, a one-GPU grader) the gloo
    ranks would put their shards on the GPU. measure.py hides the GPUs from gloo ranks before it
    imports torch, so the graded run is the CPU's on every machine."""
    from torch.distributed.fsdp._fully_shard import _fsdp_init

    assert "torch._C._get_accelerator()" in inspect.getsource(_fsdp_init._init_default_mesh)
    script = ck.code_cell(LESSON, "%%writefile {workdir}/measure.py")
    hidden = script.index('if args.backend == "gloo":')
    assert (
        script[hidden:].split("\n")[1].strip().startswith('os.environ["CUDA_VISIBLE_DEVICES"] = ""')
    )
    assert hidden < script.index("\nimport torch\n"), "before torch starts"


def test_a_failed_nccl_run_is_caught_and_recorded_as_not_completed(run_cell, tmp_path, capsys):
    source = ck.code_cell(LESSON, '"--backend", "nccl"')
    assert "timeout=" in source, "a bounded launch"

    class FailingLaunch:
        LaunchError = gpucourse.launch.LaunchError

        @staticmethod
        def torchrun(*args, **kwargs):
            raise gpucourse.launch.LaunchError("rank 1 hung: timed out")

    namespace = {"launch": FailingLaunch, "backend": "nccl", "workdir": tmp_path}
    namespace |= {"json": __import__("json"), "gpu_measured": None}
    assert run_cell(source, namespace) == []  # no exception: Run All goes on
    assert namespace["gpu_measured"] is None and "rank 1 hung" in capsys.readouterr().out
    namespace |= {"gpucourse": gpucourse, "device": torch.device("cuda")}
    (record,) = run_cell(ck.gpu_check(LESSON, f"GPU check: {COMPLETED}"), namespace, strict=True)
    assert record["kind"] == "precondition" and record["met"] is False, record
    namespace["gpu_measured"] = results()
    (record,) = run_cell(ck.gpu_check(LESSON, f"GPU check: {COMPLETED}"), namespace, strict=True)
    assert record["met"] is True, record


def test_the_learners_code_runs_on_the_gloo_ranks_only():
    script = ck.code_cell(LESSON, "%%writefile {workdir}/measure.py")
    guard = script.index('\nif args.backend == "gloo":  # the graded run')
    assert guard < script.index("your_shard_model(exercise)"), script[guard:]


def test_the_zero3_steps_never_build_the_whole_model_on_a_rank():
    """The peak claim measures FSDP, not construction: measure.py builds its ZeRO-3 model on
    `meta`, shards it, then `to_empty` and initialises each rank's shards (offload excepted)."""
    script = ck.code_cell(LESSON, "%%writefile {workdir}/measure.py")
    recipe = script[script.index("def build_sharded") : script.index("def cuda_bytes")]
    order = ['with torch.device("meta")', "shard_per_block(model", "model.to_empty(device=device)"]
    assert all(step in recipe for step in order), recipe
    assert [recipe.index(step) for step in order] == sorted(recipe.index(s) for s in order)
    assert "model = build_sharded(**options)" in script
