"""Scale a lesson's work to the device.

Every lesson must run on a 2-core CPU in about a minute and still show the
real effect on a big GPU. Lessons never hard-code a size; they ask
``workload(device, cpu=..., gpu=...)``. While nbgrader executes a notebook
(it sets ``NBGRADER_EXECUTION``) the demos shrink further, to the
``grading`` size, so grading is quick and never depends on speed.
"""

from __future__ import annotations

import os


def is_grading() -> bool:
    """True while nbgrader executes the notebook (autograde or validate)."""
    return bool(os.environ.get("NBGRADER_EXECUTION"))


def workload(device, *, cpu, gpu, grading=None):
    """Pick the size of a demo for ``device``.

    ``cpu`` is the size for a CPU (also the default while grading), ``gpu``
    the size for a CUDA GPU, and ``grading`` an optional smaller size used
    while nbgrader runs the notebook.
    """
    if is_grading():
        return cpu if grading is None else grading
    kind = getattr(device, "type", None) or str(device).split(":")[0]
    return gpu if kind == "cuda" else cpu
