"""What every test shares: a clean course environment.

A maintainer's shell may carry the GPU runner's switches (strict mode, a claims file); a CPU test
must not inherit them, so they are removed for every test that is not marked ``gpu``. Shared
helpers live in ``coursekit``, ``gradingkit`` and ``browserkit``.
"""

from __future__ import annotations

import pytest

RUNNER_VARIABLES = ("GPUCOURSE_REQUIRE_GPU", "GPUCOURSE_CLAIMS")


@pytest.fixture(autouse=True)
def course_environment(request, monkeypatch):
    """Strict mode and the claims file belong to the GPU runner: CPU tests run without them."""
    if request.node.get_closest_marker("gpu") is None:
        for name in RUNNER_VARIABLES:
            monkeypatch.delenv(name, raising=False)


def pytest_collection_modifyitems(items):
    """The slow tests (notebook runs, the grader) first: `make test`'s two workers then end on
    short tests, instead of one idling while the other runs a last long one."""
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)
