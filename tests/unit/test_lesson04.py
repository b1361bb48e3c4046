"""Lesson 04's speed claims ask for 1.2x only where this CNN's step is compute-bound: on a card with
many fp32 FLOPs per byte of memory bandwidth (an L4) its fp32 GroupNorm traffic bounds the step, and
mixed precision or TF32 may only tie with strict fp32."""

from types import SimpleNamespace

import coursekit as ck
import pytest

import gpucourse


@pytest.mark.parametrize(
    "name, faster",
    [
        ("Tesla T4", 1.2),  # 25 FLOP per byte
        ("NVIDIA A100-SXM4-80GB", 1.2),  # 12.5
        ("NVIDIA H100 80GB HBM3", 1.2),  # 20
        ("NVIDIA L4", 1.0),  # 101: memory-bound here
        ("NVIDIA A10G", 1.0),  # 58
        ("NVIDIA GeForce RTX 4090", 1.0),  # a card the course does not know: "not slower"
    ],
)
def test_the_speed_bound_follows_the_card(name, faster):
    namespace = {"gpucourse": gpucourse, "facts": SimpleNamespace(name=name)}
    exec(ck.code_cell("04_mixed_precision", "flop_per_byte = "), namespace)
    assert namespace["faster"] == faster
