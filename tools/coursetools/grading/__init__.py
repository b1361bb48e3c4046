"""Grading a class with nbgrader: each student's kernel in a sandbox, bounded in time, fair to
slips.

One module per job:

- ``sandbox``  the bubblewrap sandbox and prlimit limits a student's kernel runs in
  (``sandbox_problem``, ``gpu_passthrough``, ``sandbox_command``, ``SandboxedKernelManager``);
- ``execute``  ``GradingExecute``, nbgrader's Execute with per-cell and per-submission bounds, a
  dead kernel survived and the cells tagged ``demo`` or ``gpu-check`` skipped (``ValidateExecute``:
  the same skips for the learner's Validate button);
- ``cells``    what happens to cells around the run: deleted test cells restored in place
  (``RestoreCells``), timeouts as comments (``SaveAutoGrades``), feedback without hidden tests
  (``HideHiddenTests``), a graded cell judged by raising only (``stderr_kept_visible``, also for the
  Validate button);
- ``referee``  ``flags(nb)``: answer cells that rebind what the tests judge with, read statically,
  shown (never graded) in the class table and report;
- ``config``   ``configure(c)``, called by the course's nbgrader_config.py;
- ``rows``     ``class_rows(course, lesson)``: the one walk of the gradebook, autograded/ and the
  grading times;
- ``table``    ``make grade``: autograde every submission, print the class table (``python -m
  coursetools.grading``);
- ``report``   ``make report``: the class report as HTML and CSV (``python -m
  coursetools.grading.report``).

Importing this package imports nothing else; the modules import nbgrader where they need it.
"""
