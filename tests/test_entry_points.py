"""The README's entry points do what it says: `make lab` serves JupyterLab, `make doctor` reports."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request

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
    finally:
        os.killpg(lab.pid, signal.SIGTERM)
        lab.wait(timeout=30)


@pytest.mark.slow
def test_make_doctor_prints_the_report():
    result = subprocess.run(["make", "-s", "doctor"], cwd=ck.ROOT, capture_output=True, text=True, timeout=180)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "environment report" in result.stdout and "Diagnosis:" in result.stdout, result.stdout
