"""Compatibility names: the grading code lives in ``coursetools.grading`` (one module per job).

Kept for the files that still import ``coursetools.grade`` (the GPU tests); new code imports the
modules of ``coursetools.grading``. ``python -m coursetools.grade`` is ``python -m
coursetools.grading``.
"""

from __future__ import annotations

import sys

from coursetools.grading.cells import stderr_kept_visible
from coursetools.grading.sandbox import (
    UNSANDBOXED,
    WHY,
    gpu_passthrough,
    sandbox_command,
    sandbox_problem,
)
from coursetools.grading.sandbox import python_dirs as _python_dirs

__all__ = [
    "UNSANDBOXED",
    "WHY",
    "_python_dirs",
    "gpu_passthrough",
    "sandbox_command",
    "sandbox_problem",
    "stderr_kept_visible",
]

if __name__ == "__main__":
    from coursetools.grading.table import main

    sys.exit(main())
