"""What every test shares: a clean course environment.

A maintainer's shell may carry the GPU runner's switches (strict mode, a claims file); a CPU test
must not inherit them, so they are removed for every test that is not marked ``gpu``. Shared
helpers live in ``coursekit``, ``gradingkit`` and ``browserkit``.
"""

from __future__ import annotations

import json
import os

import pytest

RUNNER_VARIABLES = ("GPUCOURSE_REQUIRE_GPU", "GPUCOURSE_CLAIMS")
CI_VARIABLE = "GPUCOURSE_CI"  # .ci/run sets it: a skipped `ci_required` test fails there


@pytest.fixture(autouse=True)
def course_environment(request, monkeypatch):
    """Strict mode and the claims file belong to the GPU runner: CPU tests run without them."""
    if request.node.get_closest_marker("gpu") is None:
        for name in RUNNER_VARIABLES:
            monkeypatch.delenv(name, raising=False)


@pytest.fixture
def run_cell(monkeypatch, tmp_path):
    """Run a lesson cell's source as the GPU runner does: its claims recorded and, with
    ``strict=True``, a failed one raising. Returns the records that run wrote."""
    record = tmp_path / "claims.jsonl"
    monkeypatch.setenv("GPUCOURSE_CLAIMS", str(record))
    monkeypatch.delenv("GPUCOURSE_CLAIMS_DEFER", raising=False)

    def recorded() -> list[str]:
        return record.read_text().splitlines() if record.exists() else []

    def run(source: str, namespace: dict, strict: bool = False) -> list[dict]:
        if strict:
            monkeypatch.setenv("GPUCOURSE_REQUIRE_GPU", "1")
        else:
            monkeypatch.delenv("GPUCOURSE_REQUIRE_GPU", raising=False)
        before = len(recorded())
        exec(source, namespace)
        return [json.loads(line) for line in recorded()[before:]]

    return run


def pytest_collection_modifyitems(items):
    """The slow tests (notebook runs, the grader) first: `make test`'s two workers then end on
    short tests, instead of one idling while the other runs a last long one."""
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """In CI, a test marked ``ci_required`` that skips (no Chromium, no sandbox) fails instead: CI
    installs what it needs, so a skip there means a check silently stopped running."""
    outcome = yield
    report = outcome.get_result()
    if report.skipped and os.environ.get(CI_VARIABLE) and item.get_closest_marker("ci_required"):
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else report.longrepr
        report.outcome = "failed"
        report.longrepr = f"required in CI ({CI_VARIABLE}=1), but it skipped: {reason}"
