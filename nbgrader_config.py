"""nbgrader configuration for the course (see README, "For instructors")."""

c = get_config()  # noqa: F821 (provided by nbgrader)

c.CourseDirectory.course_id = "gpus-for-ml"
# solutions/ is the single source; notebooks/ is what `make notebooks` generates.
c.CourseDirectory.source_directory = "solutions"
c.CourseDirectory.release_directory = "notebooks"
# The course's data is generated, never stored in the assignment.
c.CourseDirectory.ignore = [".ipynb_checkpoints", "*.pyc", "__pycache__", "feedback"]

# Grading (tools/grade.py): each student's kernel in a sandbox, a deleted test cell restored from the source, a
# dead kernel survived. Under NBGRADER_EXECUTION the demos shrink: the slowest graded cell of any solution took
# SLOWEST s on a shared 2-core CPU, so a cell gets 120 s and a submission 600 s (an endless loop costs one cell's
# 120 s, the other cells are still graded).
c.Execute.timeout = 120
c.GradingExecute.submission_timeout = 600
try:
    from coursetools import grade
except ImportError:  # a scratch copy made only to generate notebooks/ has no tools/: it cannot autograde
    from nbgrader.preprocessors import NbGraderPreprocessor

    class NoSandbox(NbGraderPreprocessor):
        def preprocess(self, nb, resources):
            raise RuntimeError("the course tools (coursetools, tools/ in the course) are not installed: "
                               "autograde will not run students' code without their sandbox; run `make` first")

    c.Autograde.autograde_preprocessors = [NoSandbox]
else:
    grade.configure(c)

# Feedback (nbgrader generate_feedback) shows each failed test's error message, not the hidden tests' code
# (tools/grade.py's HideHiddenTests). False: the feedback shows the hidden tests' code too, as nbgrader alone does.
c.HideHiddenTests.enabled = True
