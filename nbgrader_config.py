"""nbgrader configuration for the course (for instructors: docs/instructors.md)."""

import os

c = get_config()  # noqa: F821 (provided by nbgrader)

c.CourseDirectory.course_id = "gpus-for-ml"
# solutions/ is the single source; notebooks/ is what `make notebooks` generates.
c.CourseDirectory.source_directory = "solutions"
c.CourseDirectory.release_directory = "notebooks"
# The course's data is generated, never stored in the assignment.
c.CourseDirectory.ignore = [".ipynb_checkpoints", "*.pyc", "__pycache__", "feedback"]

# Grading (coursetools.grading): each student's kernel in a sandbox, a deleted test cell restored
# from the source, a dead kernel survived, cells tagged `demo` or `gpu-check` not run. Under
# NBGRADER_EXECUTION the lessons shrink their work, so a cell gets 120 s and a submission 600 s: an
# endless loop costs one cell's 120 s and the other cells are still graded. The grader logs each
# submission's slowest cell, with a warning when it took over half its timeout.
c.Execute.timeout = 120
c.GradingExecute.submission_timeout = 600
try:
    from coursetools.grading.config import configure
except ImportError:  # a course copy without the course tools installed: it cannot autograde
    from nbgrader.preprocessors import NbGraderPreprocessor

    class NoSandbox(NbGraderPreprocessor):
        def preprocess(self, nb, resources):
            raise RuntimeError(
                "the course tools (coursetools, installed by `make`) are not installed: autograde "
                "will not run students' code without their sandbox; run `make` first"
            )

    c.Autograde.autograde_preprocessors = [NoSandbox]
else:
    # the gradebook beside this file; a write waits up to a minute for another grader's
    configure(c, root=os.path.dirname(os.path.abspath(__file__)))

# Feedback (nbgrader generate_feedback) shows each failed test's error message, not the hidden
# tests' code (coursetools.grading.cells.HideHiddenTests). False: the feedback shows the hidden
# tests' code too.
c.HideHiddenTests.enabled = True
