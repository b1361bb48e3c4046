"""gpucourse.precision: the autocast dtype per device, the scaler, the messages, fp32_math."""

import dataclasses

import pytest
import torch

import gpucourse
from gpucourse import precision

T4 = precision.describe_gpu("Tesla T4", (7, 5))
V100 = precision.describe_gpu("Tesla V100", (7, 0))
A100 = precision.describe_gpu("A100", (8, 0))
H100 = precision.describe_gpu("H100", (9, 0))
P100 = precision.describe_gpu("Tesla P100", (6, 0))


@pytest.mark.parametrize(
    "facts,dtype,scaler",
    [(T4, torch.float16, True), (V100, torch.float16, True), (A100, torch.bfloat16, False),
     (H100, torch.bfloat16, False), (P100, torch.float32, False)],
)
def test_the_gpu_rule(facts, dtype, scaler):
    plan = precision.amp_plan(facts=facts)
    assert (plan.device_type, plan.dtype, plan.use_scaler) == ("cuda", dtype, scaler)
    assert plan.enabled == (dtype != torch.float32)


def test_the_cpu_gets_bf16_without_a_scaler():
    plan = precision.amp_plan("cpu")
    assert (plan.device_type, plan.dtype, plan.use_scaler) == ("cpu", torch.bfloat16, False)
    assert "bf16" in plan.reason


def test_the_reason_says_whether_the_cpu_has_native_bf16():
    cpu = gpucourse.device_facts("cpu")
    fast = precision.amp_plan(facts=dataclasses.replace(cpu, bf16=True)).reason
    slow = precision.amp_plan(facts=dataclasses.replace(cpu, bf16=False)).reason
    assert "has native bf16" in fast and "no native bf16" in slow


def test_described_gpus_follow_the_device_module():
    assert (T4.tensor_cores, T4.bf16, T4.tf32, T4.fp8) == (True, False, False, False)
    assert (H100.bf16, H100.tf32, H100.fp8) == (True, True, True)
    assert precision.describe_gpu("A10G", (8, 6)).fp8 is False


def test_bf16_on_a_t4_is_explained():
    with pytest.raises(precision.PrecisionError, match=r"compute capability 7\.5.*fp16 with a GradScaler"):
        precision.amp_plan(facts=T4, want="bf16")


def test_fp16_on_the_cpu_is_explained():
    with pytest.raises(precision.PrecisionError, match="fp16 asked for on the CPU.*bf16"):
        precision.amp_plan("cpu", want="fp16")
    with pytest.raises(precision.PrecisionError, match="on the CPU"):
        precision.grad_scaler("cpu", torch.float16)


def test_an_explicit_choice_is_kept_where_it_is_fine():
    assert precision.amp_plan(facts=H100, want="fp16").dtype == torch.float16
    assert precision.amp_plan(facts=H100, want="fp16").use_scaler
    assert precision.amp_plan(facts=T4, want=torch.float32).enabled is False
    assert precision.amp_plan("cpu", want="bfloat16").dtype == torch.bfloat16


@pytest.mark.parametrize("name,dtype", [("bf16", torch.bfloat16), ("FP16", torch.float16), ("half", torch.float16),
                                        (" float32 ", torch.float32), (torch.bfloat16, torch.bfloat16)])
def test_dtype_names(name, dtype):
    assert precision.as_dtype(name) is dtype


@pytest.mark.parametrize("bad", ["tf32", "int8", "", torch.int8, torch.float64])
def test_unknown_precisions_are_explained(bad):
    with pytest.raises(precision.PrecisionError, match="'bf16', 'fp16' or 'fp32'"):
        precision.as_dtype(bad)


def test_other_device_types_get_fp32_or_an_explanation():
    assert precision.amp_plan("meta").enabled is False
    with pytest.raises(precision.PrecisionError, match="'meta'"):
        precision.amp_plan("meta", want="bf16")


def test_the_plan_autocasts_a_matmul():
    plan = precision.amp_plan("cpu")
    a = torch.randn(4, 4)
    with plan.autocast():
        assert (a @ a).dtype == torch.bfloat16
    with precision.amp_plan("cpu", want="fp32").autocast():
        assert (a @ a).dtype == torch.float32


def test_the_plan_scaler_is_enabled_only_for_fp16_on_a_gpu():
    assert precision.amp_plan("cpu").grad_scaler().is_enabled() is False
    assert precision.grad_scaler("cpu").is_enabled() is False
    fp16 = precision.AmpPlan("cpu", torch.float16, True, "test")  # the CPU scaler exists in torch; the rule is ours
    assert fp16.grad_scaler().is_enabled() is True


def test_a_disabled_scaler_is_a_plain_optimizer_step():
    model = torch.nn.Linear(3, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    scaler = precision.amp_plan("cpu").grad_scaler()
    before = model.weight.detach().clone()
    scaler.scale(model(torch.ones(2, 3)).sum()).backward()
    scaler.step(opt)
    scaler.update()
    assert torch.allclose(model.weight, before - 0.1 * 2)  # d(sum)/dw = 2 per weight, lr 0.1


def test_a_cuda_scaler_with_cpu_tensors_is_explained():
    scaler = torch.amp.GradScaler("cuda", enabled=False)
    with pytest.raises(precision.PrecisionError, match="made for 'cuda' but the tensors are on 'cpu'.*bf16"):
        precision.check_scaler(scaler, torch.zeros(()))
    precision.check_scaler(torch.amp.GradScaler("cpu"), torch.zeros(()))  # a fitting scaler passes
    precision.check_scaler(scaler)  # no tensors, nothing to check


def test_str_names_dtype_and_scaler():
    assert str(precision.amp_plan(facts=T4)).startswith("float16 autocast on cuda, with a GradScaler")
    assert str(precision.amp_plan(facts=P100)).startswith("float32 on cuda, autocast off")


@pytest.mark.parametrize("mode,matmul", [("ieee", "highest"), ("tf32", "high")])
def test_fp32_math_sets_and_restores(mode, matmul):
    before = torch.get_float32_matmul_precision(), torch.backends.cudnn.conv.fp32_precision
    with precision.fp32_math(mode):
        assert torch.get_float32_matmul_precision() == matmul
        assert torch.backends.cudnn.conv.fp32_precision == mode
    assert (torch.get_float32_matmul_precision(), torch.backends.cudnn.conv.fp32_precision) == before


def test_fp32_math_restores_after_an_error():
    before = torch.get_float32_matmul_precision()
    with pytest.raises(KeyError), precision.fp32_math("tf32"):
        raise KeyError("boom")
    assert torch.get_float32_matmul_precision() == before
    with pytest.raises(precision.PrecisionError, match="'ieee'"):
        with precision.fp32_math("medium"):
            pass


def test_importing_precision_imports_no_tensorflow():
    import subprocess
    import sys

    code = "import gpucourse.precision, sys; assert 'tensorflow' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True)
