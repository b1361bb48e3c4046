"""``python -m coursetools.grading NN_topic``: autograde a class and print its table (``make
grade``)."""

import sys

from coursetools.grading.table import main

sys.exit(main())
