"""``python -m gpucourse doctor``: the environment report to paste into a bug, with a diagnosis.

The diagnosis is a list of small checks, each ``_check_*(facts) -> list[Finding]``; a finding's
``code`` is stable (tests and ``--json`` read it), its wording is for people. Exit status 1 on an
error.
"""

from .checks import AS_SHIPPED, CHECKS, GPU_SET_FIX, Finding, diagnose
from .probes import (
    FRAMEWORKS,
    collect,
    cuda_major,
    probe_driver,
    probe_framework,
    probe_nvidia_packages,
    probe_shm,
)
from .report import main, render

__all__ = [
    "AS_SHIPPED",
    "CHECKS",
    "FRAMEWORKS",
    "GPU_SET_FIX",
    "Finding",
    "collect",
    "cuda_major",
    "diagnose",
    "main",
    "probe_driver",
    "probe_framework",
    "probe_nvidia_packages",
    "probe_shm",
    "render",
]
