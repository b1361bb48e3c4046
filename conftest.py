"""Repository-wide pytest set-up (tests/ and the nbval run over solutions/).

`make test` runs with pytest-xdist's `--dist loadgroup`: every notebook run
by nbval is put in one group so its cells share a kernel on one worker,
while all other tests spread over the workers.
"""

import pytest


def pytest_collection_modifyitems(config, items):
    for item in items:
        if item.nodeid.split("::")[0].endswith(".ipynb"):
            item.add_marker(pytest.mark.xdist_group(item.nodeid.split("::")[0]))
            item.add_marker(pytest.mark.slow)
