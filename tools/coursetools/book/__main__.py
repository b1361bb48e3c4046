"""`python -m coursetools.book`: build the reading edition."""

import sys

from coursetools.book.site import main

sys.exit(main())
