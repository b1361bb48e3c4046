"""The reading edition: the course as a static site with every lesson's outputs (`make book`).

The lesson pages are the lessons as `make test` ran them: tests/lessons/test_nbval.py runs each
solution under nbval with the plugin `coursetools.executed`, which keeps the executed notebook in
test-artifacts/executed/NN_topic.ipynb (a GPU run's copies, where the GPU runner keeps them in
test-artifacts/executed-gpu/, come first). Nothing is executed here. Each page shows:

- the lesson as a learner gets it, with the outputs of that run, and a note saying on which
  device, when and at which commit they were measured;
- each exercise as the learner's version (the student notebook's cell), with the model answer and
  its outputs folded below it ("Show a solution");
- the visible tests without the hidden ones; no `### BEGIN`/`### END` marker anywhere;
- each GPU-check cell as its one-line result, without its code.

The site is Sphinx with MyST-NB and the Sphinx Book Theme (docs/book/conf.py says why not Jupyter
Book 2). Usage: `python -m coursetools.book [--out DIR] [--executed DIR ...] [LESSON ...]`.
"""

from coursetools.book.pages import (  # noqa: F401
    WIDGET_MIME,
    BookError,
    leaks,
    lesson_page,
)
from coursetools.book.site import build, main, missing_packages  # noqa: F401
