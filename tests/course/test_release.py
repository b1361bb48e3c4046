"""The helper is released like a library (coursetools.release): the set-up cells install the tag of
the version whose source the suite tests, and the version moves when the source does."""

from __future__ import annotations

import json

import pytest
from coursetools import release


def test_the_version_holds_this_source_and_the_setup_cells_install_its_tag():
    assert release.problems() == []


@pytest.fixture
def recorded(tmp_path, monkeypatch):
    """A course whose releases file holds 0.2.0 (with one public function) and what is asked."""
    releases = tmp_path / "releases.json"
    old_api = {"gpucourse.device.choose_device": "(prefer=None)"}
    releases.write_text(json.dumps({"0.2.0": {"digest": "a", "api": old_api}}))
    monkeypatch.setattr(release, "RELEASES", releases)

    def now(version: str, digest: str, api: dict, cells: str) -> list[str]:
        monkeypatch.setattr(release, "version", lambda: version)
        monkeypatch.setattr(release, "digest", lambda: digest)
        monkeypatch.setattr(release, "api", lambda: api)
        monkeypatch.setattr(release, "setup_cell_versions", lambda: {"01_verify_gpu": cells})
        return release.problems()

    return now, old_api


def test_a_changed_helper_or_a_broken_name_in_a_patch_must_move_the_version(recorded, capsys):
    now, api = recorded
    assert now("0.2.0", "a", api, "0.2.0") == []
    (changed,) = now("0.2.0", "b", api, "0.2.0")  # the source moved, the version did not
    assert "source changed since 0.2.0" in changed
    (stale,) = now("0.2.0", "a", api, "0.1.0")
    assert "set-up cells that do not install v0.2.0" in stale
    assert "not recorded" in now("0.2.1", "b", api, "0.2.1")[0]
    # record 0.2.1 with a changed signature: a patch may not break a public name, a minor may
    renamed = {"gpucourse.device.choose_device": "(device=None)"}
    assert release.record_entry("0.2.1", "b", renamed) is None
    (breaks,) = now("0.2.1", "b", renamed, "0.2.1")
    assert "bump the minor version" in breaks and "choose_device(prefer=None)" in breaks
    assert release.record_entry("0.3.0", "c", renamed) is None
    assert now("0.3.0", "c", renamed, "0.3.0") == []
    assert "recorded with another source" in release.record_entry("0.3.0", "d", renamed)
