"""The entry points do what the README says: a bare `make` prints the help (every option is
documented there) and changes nothing, `make lab` serves JupyterLab without asking about
Jupyter news, `make doctor` reports."""

from __future__ import annotations

import json
import os
import re
import shlex
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

from gpucourse import doctor

MAKEFILE = (ck.ROOT / "Makefile").read_text()


def make(*args: str) -> subprocess.CompletedProcess:
    """`make` in the checkout as a person types it: no GPU knob or make state from the caller."""
    env = {
        k: v for k, v in os.environ.items() if k not in {"GPU", "MAKEFLAGS", "MFLAGS", "MAKELEVEL"}
    }
    return subprocess.run(
        ["make", "--no-print-directory", *args],
        cwd=ck.ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


def tree(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in folder.rglob("*") if p.is_file()}


# A bare `make` once ran the set-up stamp's rule when .venv held the other set (that rule became
# the first target): `rm -rf .venv` and a rebuild instead of the help. Each case: a .venv make
# would switch, or none at all.
SWITCHES = {
    "no environment yet": (None, []),
    "the GPU set, GPU=0 given": ("gpu", ["GPU=0"]),
    "the CPU set, nvidia-smi lists a GPU": ("cpu", ["NVIDIA_SMI={smi}"]),
}


@pytest.mark.parametrize("case", SWITCHES)
def test_a_bare_make_prints_the_help_and_changes_nothing(case, tmp_path):
    held, knobs = SWITCHES[case]
    venv = tmp_path / "venv"
    smi = tmp_path / "nvidia-smi"
    smi.write_text("#!/bin/sh\necho 'GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-0d1e2f)'\n")
    smi.chmod(0o755)
    if held:
        venv.mkdir()
        (venv / "pyvenv.cfg").write_text("home = /usr/bin\n")
        (venv / ".gpucourse-set").write_text(held + "\n")
    args = [f"VENV={venv}", *(knob.format(smi=smi) for knob in knobs)]
    before = tree(tmp_path)

    dry = make("-n", *args)
    assert dry.returncode == 0, dry.stdout + dry.stderr
    commands = dry.stdout.splitlines()
    assert commands and all(line.startswith("echo ") for line in commands), (
        "a bare `make -n` must run nothing but the help's echo lines:\n" + dry.stdout
    )

    bare, help_ = make(*args), make("help", *args)
    assert bare.returncode == 0, bare.stdout + bare.stderr
    assert bare.stdout == help_.stdout and len(bare.stdout.splitlines()) == len(commands)
    assert "make lab" in bare.stdout and "rm -rf" not in bare.stdout + bare.stderr
    assert tree(tmp_path) == before, "a bare `make` changed the environment's folder"


BUILTIN = {"MAKE", "MAKECMDGOALS", "MAKEFLAGS", "MAKELEVEL", "CURDIR", "SHELL", "PATH"}


def makefile_knobs(makefile: str) -> set[str]:
    """The options a user sets: the Makefile's `X ?= default`s, and what it reads but never sets."""
    defaults = set(re.findall(r"^(\w+)\s*\?=", makefile, re.M))
    assigned = set(re.findall(r"^\s*(\w+)\s*[:+]?=", makefile, re.M))
    read = set(re.findall(r"(?<!\$)\$\(([A-Z][A-Z0-9_]*)\)", makefile))
    return defaults | (read - assigned - BUILTIN)


def test_the_help_documents_every_option():
    knobs = makefile_knobs(MAKEFILE)
    assert {"GPU", "PYTHON", "VENV", "JOBS", "LESSON", "GPU_ARGS", "WHEELHOUSE"} <= knobs, knobs
    shown = make("help").stdout
    missing = sorted(k for k in knobs if not re.search(rf"(?<!\w){k}=", shown))
    assert not missing, f"options the Makefile reads that `make help` does not document: {missing}"
    assert re.search(r"^\.PHONY: .*\bhelp\b", MAKEFILE, re.M), "help is a phony target"
    phony = {t for line in re.findall(r"^\.PHONY:(.*)$", MAKEFILE, re.M) for t in line.split()}
    targets = set(re.findall(r"^([a-z][a-z-]*):", MAKEFILE, re.M))
    assert targets <= phony, (
        f"targets that are not files belong on the .PHONY line: {targets - phony}"
    )
    undocumented = sorted(t for t in targets - {"help"} if f"make {t}" not in shown)
    assert not undocumented, f"targets `make help` does not list: {undocumented}"


README = ck.ROOT / "README.md"


def test_the_readme_is_a_front_door():
    """One screen for a learner: the first lesson within the first 30 lines, under 1,000 words, the
    commands it promises; the rest lives on docs/ pages."""
    text = README.read_text()
    first = next(i for i, line in enumerate(text.splitlines(), 1) if "](notebooks/01_" in line)
    assert first <= 30, f"the first lesson's link is on line {first}: keep the README's top short"
    assert len(text.split()) < 1000, (
        f"the README has {len(text.split())} words: move detail to docs/"
    )
    for command in ("make lab", "make test", "make doctor"):
        assert f"`{command}`" in text or f"{command} " in text, (
            f"the README says what {command} does"
        )


def test_the_lessons_page_lists_every_lesson():
    """docs/lessons.md, the syllabus the README points to, has a row per lesson, in order."""
    rows = [
        line
        for line in (ck.ROOT / "docs" / "lessons.md").read_text().splitlines()
        if re.match(r"\|\s*\d\d\s*\|", line)
    ]
    lessons = ck.lessons()
    assert [row.split("|")[1].strip() for row in rows] == [lesson[:2] for lesson in lessons]
    for lesson, row in zip(lessons, rows, strict=True):
        assert f"](../notebooks/{lesson}/{ck.solution_path(lesson).name})" in row, row[:80]


def slug(heading: str) -> str:
    """The anchor GitHub gives a heading."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


@pytest.mark.parametrize(
    "page", ["README.md", *(f"docs/{p.name}" for p in sorted((ck.ROOT / "docs").glob("*.md")))]
)
def test_the_front_doors_links_lead_somewhere(page):
    source = ck.ROOT / page
    broken = []
    for target in re.findall(r"\]\(([^)\s]+)\)", source.read_text()):
        if re.match(r"[a-z]+:", target):
            continue  # a web address
        path, _, anchor = target.partition("#")
        dest = (source.parent / path) if path else source
        if not dest.exists():
            broken.append(target)
        elif anchor and dest.suffix == ".md":
            headings = re.findall(r"^#+\s+(.*)$", dest.read_text(), re.M)
            if anchor not in {slug(h) for h in headings}:
                broken.append(target)
    assert not broken, f"{page} links to what is not there: {broken}"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.mark.slow
def test_make_lab_serves_jupyterlab_on_the_notebooks():
    port = free_port()
    lab = subprocess.Popen(
        ["make", "lab", f"PORT={port}"],
        cwd=ck.ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    try:
        url, seen, deadline = None, [], time.monotonic() + 90
        while url is None and time.monotonic() < deadline and lab.poll() is None:
            line = lab.stdout.readline()
            seen.append(line)
            found = re.search(rf"http://127\.0\.0\.1:{port}/lab\?token=(\w+)", line)
            url = found and found.group(0)
        assert url, "make lab printed no URL:\n" + "".join(seen[-30:])
        token = url.rsplit("=", 1)[1]
        headers = {"Authorization": f"token {token}"}
        request = urllib.request.Request(
            f"http://127.0.0.1:{port}/api/contents/01_verify_gpu", headers=headers
        )
        listing = None
        for _ in range(150):  # the URL is printed a moment before the server answers
            try:
                with urllib.request.urlopen(request, timeout=30) as response:
                    listing = json.load(response)
                break
            except urllib.error.URLError:
                time.sleep(0.2)
        assert listing is not None, (
            "make lab printed a URL but nothing answered there:\n" + "".join(seen[-30:])
        )
        names = [item["name"] for item in listing["content"]]
        assert "verify_gpu.ipynb" in names, (
            "JupyterLab must serve notebooks/ (the student versions)"
        )
        request = urllib.request.Request(
            f"http://127.0.0.1:{port}/lab/api/settings/{NOTIFICATION}", headers=headers
        )
        with urllib.request.urlopen(request, timeout=30) as response:
            settings = json.load(response)
        assert settings["schema"]["properties"]["fetchNews"]["default"] == "false", (
            "make lab's JupyterLab would ask about Jupyter news at its first start"
        )
    finally:
        os.killpg(lab.pid, signal.SIGTERM)
        lab.wait(timeout=30)


NOTIFICATION = "@jupyterlab/apputils-extension:notification"
LAB = Path(sys.prefix) / "share" / "jupyter" / "lab"


def test_the_course_jupyterlab_does_not_ask_about_jupyter_news(tmp_path):
    """JupyterLab's announcements plugin asks "Would you like to get notified about official
    Jupyter news?" while the notification settings' fetchNews is "none" ("Ask"), its schema's
    default. `make` (and Binder's postBuild) put tools/jupyterlab-overrides.json into this
    environment's settings overrides, never the learner's own settings: what this JupyterLab
    serves a learner without settings is "false"."""
    from jsonschema import Draft7Validator
    from jupyterlab_server.settings_utils import get_settings

    own = json.loads(
        (LAB / "schemas" / "@jupyterlab" / "apputils-extension" / "notification.json").read_text()
    )
    choices = {choice["const"] for choice in own["properties"]["fetchNews"]["oneOf"]}
    assert {"none", "false"} <= choices, (
        f"JupyterLab's fetchNews takes {choices}: does tools/jupyterlab-overrides.json still apply?"
    )
    installed = LAB / "settings" / "overrides.d" / "gpucourse.json"
    assert installed.is_file(), f"{installed} is missing: `make` installs it (rerun make)"
    served, _ = get_settings(
        str(LAB / "settings"), str(LAB / "schemas"), str(tmp_path), NOTIFICATION
    )
    fetch_news = served["schema"]["properties"]["fetchNews"]
    assert fetch_news["default"] == "false"
    assert served["schema"]["properties"]["checkForUpdates"]["default"] is False
    assert served["settings"] == {}, "the learner's own settings are left alone"
    Draft7Validator.check_schema(served["schema"])
    Draft7Validator(served["schema"]).validate({"fetchNews": fetch_news["default"]})


@pytest.mark.slow
def test_make_doctor_prints_the_report():
    """`make doctor` runs `python -m gpucourse doctor`; one run of that command with `--json` (the
    doctor imports TensorFlow and DALI: one such Python is enough) gives both reports on this
    machine: the JSON's facts and stable codes, the exit status following errors (none here), and
    the text `make doctor` prints, rendered from the same facts and findings."""
    dry = make("-n", "-s", "doctor")
    assert dry.returncode == 0, dry.stdout + dry.stderr
    (command,) = [line for line in dry.stdout.splitlines() if "gpucourse doctor" in line]
    assert shlex.split(command)[1:] == ["-m", "gpucourse", "doctor"], command
    result = subprocess.run(
        [*shlex.split(command), "--json"], cwd=ck.ROOT, capture_output=True, text=True, timeout=180
    )
    report = json.loads(result.stdout)
    assert set(report) == {"facts", "findings"} and report["facts"]["torch"]["installed"], report
    assert all(f["code"] for f in report["findings"])
    errors = [f for f in report["findings"] if f["level"] == "error"]
    assert result.returncode == (1 if errors else 0), result.stderr
    assert result.returncode == 0, f"`make doctor` fails here: {errors}"
    text = doctor.render(report["facts"], [doctor.Finding(**f) for f in report["findings"]])
    assert "environment report" in text and "Diagnosis:" in text, text
