"""The README's entry points do what it says: `make lab` serves JupyterLab, `make doctor` reports."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import coursekit as ck
import pytest


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.mark.slow
def test_make_lab_serves_jupyterlab_on_the_notebooks():
    port = free_port()
    lab = subprocess.Popen(["make", "lab", f"PORT={port}"], cwd=ck.ROOT, stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        url, seen, deadline = None, [], time.monotonic() + 90
        while url is None and time.monotonic() < deadline and lab.poll() is None:
            line = lab.stdout.readline()
            seen.append(line)
            found = re.search(rf"http://127\.0\.0\.1:{port}/lab\?token=(\w+)", line)
            url = found and found.group(0)
        assert url, "make lab printed no URL:\n" + "".join(seen[-30:])
        token = url.rsplit("=", 1)[1]
        request = urllib.request.Request(f"http://127.0.0.1:{port}/api/contents/01_verify_gpu",
                                         headers={"Authorization": f"token {token}"})
        listing = None
        for _ in range(30):  # the URL is printed a moment before the server answers
            try:
                with urllib.request.urlopen(request, timeout=30) as response:
                    listing = json.load(response)
                break
            except urllib.error.URLError:
                time.sleep(1)
        assert listing is not None, "make lab printed a URL but nothing answered there:\n" + "".join(seen[-30:])
        names = [item["name"] for item in listing["content"]]
        assert "verify_gpu.ipynb" in names, "JupyterLab must serve notebooks/ (the student versions)"
        request = urllib.request.Request(f"http://127.0.0.1:{port}/lab/api/settings/{NOTIFICATION}",
                                         headers={"Authorization": f"token {token}"})
        with urllib.request.urlopen(request, timeout=30) as response:
            fetch_news = json.load(response)["schema"]["properties"]["fetchNews"]
        assert fetch_news["default"] == "false", "make lab's JupyterLab would ask about Jupyter news at its first start"
    finally:
        os.killpg(lab.pid, signal.SIGTERM)
        lab.wait(timeout=30)


NOTIFICATION = "@jupyterlab/apputils-extension:notification"
LAB = Path(sys.prefix) / "share" / "jupyter" / "lab"


def test_the_course_jupyterlab_does_not_ask_about_jupyter_news(tmp_path):
    """JupyterLab's announcements plugin asks "Would you like to get notified about official Jupyter news?" while the
    notification settings' fetchNews is "none" (its default). `make` puts tools/jupyterlab-overrides.json into the
    environment's settings overrides (never the learner's own settings), which makes the default "false"."""
    from jsonschema import Draft7Validator
    from jupyterlab_server.settings_utils import _get_overrides, _override

    bundle = next(path for path in (LAB / "static").glob("*.js") if "apputils-extension:announcements" in path.read_text())
    assert '"none"===(null==i?void 0:i.get("fetchNews").composite)' in bundle.read_text(), \
        "this JupyterLab asks about news on another condition: check tools/jupyterlab-overrides.json still stops it"
    (tmp_path / "overrides.d").mkdir()
    (tmp_path / "overrides.d" / "gpucourse.json").write_text((ck.ROOT / "tools" / "jupyterlab-overrides.json").read_text())
    overrides, error = _get_overrides(str(tmp_path))
    assert not error
    schema = json.loads((LAB / "schemas" / "@jupyterlab" / "apputils-extension" / "notification.json").read_text())
    schema = _override(NOTIFICATION, schema, overrides)
    assert schema["properties"]["fetchNews"]["default"] == "false"
    Draft7Validator.check_schema(schema)
    Draft7Validator(schema).validate({"fetchNews": schema["properties"]["fetchNews"]["default"]})


@pytest.mark.slow
def test_make_doctor_prints_the_report():
    result = subprocess.run(["make", "-s", "doctor"], cwd=ck.ROOT, capture_output=True, text=True, timeout=180)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "environment report" in result.stdout and "Diagnosis:" in result.stdout, result.stdout
