"""The entry points do what the README says: a bare `make` prints the help (every option is
documented there) and changes nothing, the set-up picks a set once and stops before an install
that cannot finish, `make lab` serves JupyterLab without asking about Jupyter news, `make doctor`
reports and never installs."""

from __future__ import annotations

import importlib.util
import json
import os
import platform
import re
import shlex
import shutil
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
import tomllib
from coursetools import pins

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


# --------------------------------- the set-up: which set, and what stops it before anything is made
# A scratch copy of what the set-up reads, a fake base Python (its .venv logs pip instead of
# installing) and a fake nvidia-smi: make's choices in a second or so, nothing installed.
SET_UP_FILES = (
    "Makefile",
    "pyproject.toml",
    "tools/pyproject.toml",
    "tools/jupyterlab-overrides.json",
    "tools/choose_set.py",
)
FAKE_PYTHON = """#!{python}
# `-m venv DIR` makes a DIR whose python logs `-m pip ...` instead of installing (its other calls
# run for real); other calls run a script in this Python, as Python {version}.
import os, runpy, sys
if {version} != (0,):
    sys.version_info = {version}
if sys.argv[1:3] == ["-m", "venv"]:
    venv = sys.argv[3]
    os.makedirs(venv + "/bin", exist_ok=True)
    open(venv + "/pyvenv.cfg", "w").write("home = fake\\n")
    with open(venv + "/bin/python", "w") as out:
        out.write("#!/bin/sh\\nif [ \\"$1 $2\\" = '-m pip' ]; "
                  "then echo \\"$*\\" >> {{0}}/pip.log; exit 0; fi\\n"
                  "exec {python} \\"$@\\"\\n".format(os.path.abspath(venv)))
    os.chmod(venv + "/bin/python", 0o755)
    sys.exit()
sys.argv = sys.argv[1:]
runpy.run_path(sys.argv[0], run_name="__main__")
"""


def fake_python(folder: Path, version: tuple = (0,)) -> Path:
    """A base Python for the set-up; `version` is what it reports ((0,): its own)."""
    path = folder / f"python-{'.'.join(map(str, version))}"
    path.write_text(FAKE_PYTHON.format(python=sys.executable, version=version))
    path.chmod(0o755)
    return path


@pytest.fixture
def checkout(tmp_path):
    for name in SET_UP_FILES:
        (tmp_path / name).parent.mkdir(exist_ok=True)
        (tmp_path / name).write_text((ck.ROOT / name).read_text())
    (tmp_path / "bin").mkdir()
    fake_python(tmp_path / "bin")
    return tmp_path


def set_up(checkout, *args, listed=None, python="python-0", **environ):
    """`make -s .venv/.gpucourse-installed ARGS` with nvidia-smi listing `listed` (None: no
    nvidia-smi at all) and PyTorch's CPU index missing; returns make's result and pip's `-e`s."""
    smi = checkout / "bin" / "nvidia-smi"
    smi.unlink(missing_ok=True)
    if listed:
        smi.write_text(f"#!/bin/sh\necho 'GPU 0: {listed} (UUID: GPU-5fd4ab3e-0000)'\n")
        smi.chmod(0o755)
    env = {k: v for k, v in os.environ.items() if k not in {"GPU", "MAKEFLAGS", "MAKELEVEL"}}
    result = subprocess.run(
        [
            "make",
            "-s",
            ".venv/.gpucourse-installed",
            f"PYTHON={checkout / 'bin' / python}",
            f"NVIDIA_SMI={smi}",
            f"CPU_INDEX=file://{checkout / 'no-index'}",
            *args,
        ],
        cwd=checkout,
        env={**env, **environ},
        capture_output=True,
        text=True,
        timeout=120,
    )
    pip_log = checkout / ".venv" / "pip.log"
    installs = pip_log.read_text().splitlines() if pip_log.exists() else []
    pip_log.unlink(missing_ok=True)
    return result, [line for line in installs if " -e " in line]


CPU_SET = ["-m pip install --quiet -e .[course]", "-m pip install --quiet -e tools"]
GPU_INDEX = tomllib.loads((ck.ROOT / "pyproject.toml").read_text())["tool"]["gpucourse"][
    "gpu-index"
]
GPU_SET = [
    f"-m pip install --quiet --extra-index-url {GPU_INDEX} -e .[course,gpu]",
    "-m pip install --quiet -e tools",
]


def test_without_a_venv_nvidia_smi_decides(checkout):
    result, installs = set_up(checkout)
    assert result.returncode == 0, result.stderr
    assert "the cpu set (nvidia-smi lists no NVIDIA GPU here; GPU=0 or GPU=1 overrides)" in (
        result.stdout
    )
    assert installs == CPU_SET
    assert (checkout / ".venv" / ".gpucourse-set").read_text().strip() == "cpu"
    overrides = checkout / ".venv/share/jupyter/lab/settings/overrides.d/gpucourse.json"
    assert json.loads(overrides.read_text()) == json.loads(
        (checkout / "tools" / "jupyterlab-overrides.json").read_text()
    )
    shutil.rmtree(checkout / ".venv")
    result, installs = set_up(checkout, listed="NVIDIA H100 80GB HBM3")
    assert "the gpu set (nvidia-smi lists GPU 0: NVIDIA H100 80GB HBM3;" in result.stdout, (
        result.stdout + result.stderr
    )
    assert installs == GPU_SET


@pytest.mark.parametrize(
    ("flag", "listed", "chosen"), [("GPU=0", "NVIDIA H100", "cpu"), ("GPU=1", None, "gpu")]
)
def test_gpu_0_and_gpu_1_override_nvidia_smi(checkout, flag, listed, chosen):
    result, installs = set_up(checkout, flag, listed=listed)
    assert f"the {chosen} set ({flag} was given)" in result.stdout
    assert installs == (GPU_SET if chosen == "gpu" else CPU_SET)


def test_a_wrong_gpu_value_is_refused(checkout):
    result, installs = set_up(checkout, "GPU=yes")
    assert result.returncode != 0 and "use GPU=1" in result.stderr and not installs


def test_an_unrelated_gpu_variable_in_the_shell_is_ignored(checkout):
    result, _ = set_up(checkout, listed="NVIDIA L4", GPU="nvidia")
    assert "the gpu set (nvidia-smi lists GPU 0: NVIDIA L4" in result.stdout, result.stderr
    shutil.rmtree(checkout / ".venv")
    result, _ = set_up(checkout, listed="NVIDIA L4", GPU="0")
    assert "the cpu set (GPU=0 was given)" in result.stdout, "GPU=0 exported still decides"


def test_the_set_stays_until_gpu_switches_it(checkout):
    """nvidia-smi decides once: a .venv keeps its set (a GPU the learner chose not to use, a
    driver that went away) until GPU=0 or GPU=1 switches it, which rebuilds it from scratch."""
    set_up(checkout)
    (checkout / ".venv" / "left-over").write_text("a CUDA 13 library")
    kept, installs = set_up(checkout, listed="NVIDIA L4")
    assert kept.returncode == 0 and installs == [] and "rebuilt" not in kept.stdout
    assert ".venv holds it, although nvidia-smi lists GPU 0: NVIDIA L4; GPU=1 switches" in (
        kept.stdout
    )
    os.utime(checkout / "pyproject.toml")  # a new pin: the same set, installed again in place
    again, installs = set_up(checkout, listed="NVIDIA L4")
    assert installs[0] == CPU_SET[0] and (checkout / ".venv" / "left-over").exists()
    switched, installs = set_up(checkout, "GPU=1")
    assert "(GPU=1 was given); .venv holds the cpu set and is rebuilt" in switched.stdout
    assert installs == GPU_SET and not (checkout / ".venv" / "left-over").exists()
    kept, installs = set_up(checkout)
    assert kept.returncode == 0 and installs == []
    assert "the gpu set (.venv holds it, although nvidia-smi lists no NVIDIA GPU here; GPU=0" in (
        kept.stdout
    )


def test_a_venv_from_before_the_two_sets_counts_as_the_cpu_set(checkout):
    set_up(checkout)
    (checkout / ".venv" / ".gpucourse-set").unlink()
    result, installs = set_up(checkout, listed="NVIDIA L4")
    assert (
        result.returncode == 0
        and installs == []
        and "the cpu set (.venv holds it" in (result.stdout)
    )


@pytest.mark.skipif(platform.system() != "Linux", reason="PyPI's PyTorch is a CUDA build on Linux")
@pytest.mark.parametrize("answers", [True, False])
def test_the_cpu_set_takes_pytorchs_cpu_wheels_where_its_index_answers(checkout, answers):
    """A local folder stands in for https://download.pytorch.org/whl/cpu; the default is pins'."""
    index = checkout / "cpu-index"
    if answers:
        index.mkdir()
    result, installs = set_up(checkout, f"CPU_INDEX=file://{index}")
    if answers:
        assert f"PyTorch: its CPU build, from file://{index}" in result.stdout, result.stderr
        assert (
            installs[0] == f"-m pip install --quiet --extra-index-url file://{index} -e .[course]"
        )
    else:
        assert f"PyTorch: PyPI's build, a CUDA build (4 GB more), as file://{index} did not" in (
            result.stdout
        )
        assert installs == CPU_SET
    assert f"CPU_INDEX={pins.CPU_TORCH_INDEX}" in make("help").stdout.split()
    start = time.monotonic()  # nothing listening there: PyPI's build at once
    probe = subprocess.run(
        [sys.executable, "tools/choose_set.py", "probe", f"http://127.0.0.1:{free_port()}/"],
        cwd=ck.ROOT,
        capture_output=True,
        text=True,
    )
    assert probe.stdout.strip() == "" and time.monotonic() - start < 5


def test_python_older_than_3_11_stops_before_anything_is_made(checkout):
    python = fake_python(checkout / "bin", (3, 10, 14, "final", 0))
    before = tree(checkout)
    result, installs = set_up(checkout, python=python.name)
    assert result.returncode != 0 and not installs
    assert "needs Python 3.11 or newer" in result.stderr and "Python 3.10.14" in result.stderr
    assert tree(checkout) == before, "nothing is made before the Python is known to be new enough"


def test_too_little_disk_stops_before_anything_is_made(checkout, monkeypatch):
    before = tree(checkout)
    result, installs = set_up(checkout, "DISK_GB=1000000")
    assert result.returncode != 0 and not installs and tree(checkout) == before
    assert "Not enough disk space: the set-up takes about 1e+06 GB" in result.stderr
    assert "DISK_GB=0 skips this check" in result.stderr
    # Left out, DISK_GB is what the set takes; `make test` counts .venv-colab too.
    spec = importlib.util.spec_from_file_location("choose_set", ck.ROOT / "tools/choose_set.py")
    choose_set = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(choose_set)
    monkeypatch.setattr(choose_set.shutil, "disk_usage", lambda _: shutil._ntuple_diskusage(
        0, 0, 12 * 2**30))  # fmt: skip
    venv, colab, url = str(checkout / ".venv"), str(checkout / ".venv-colab"), "file:///x"
    for found, need in (("", 17), (url, 13)):
        with pytest.raises(SystemExit, match=f"about {need} GB, and .* has 12.0 GB free"):
            choose_set.check("cpu", venv, found, url, "", colab)
    choose_set.check("cpu", venv, "", url, "")  # 9 GB without the Colab set
    choose_set.check("gpu", venv, "", url, "")  # 10


def test_diagnostics_never_install(tmp_path):
    """`make doctor` and `make help` build nothing, even where GPU=1 would switch .venv's set;
    without a .venv, the doctor reports on the Python as it is and says what sets one up."""
    smi = tmp_path / "nvidia-smi"
    smi.write_text("#!/bin/sh\necho 'GPU 0: Tesla P100-PCIE-16GB (UUID: GPU-0d1e2f)'\n")
    smi.chmod(0o755)
    venv = tmp_path / "venv"
    venv.mkdir()
    (venv / "pyvenv.cfg").write_text("home = /usr/bin\n")
    (venv / ".gpucourse-set").write_text("cpu\n")
    for goal in ("doctor", "help"):
        dry = make("-n", goal, f"VENV={venv}", f"NVIDIA_SMI={smi}", "GPU=1")
        assert dry.returncode == 0, dry.stderr
        assert not re.search(r"rm -rf|pip install|-m venv|rebuilt", dry.stdout), dry.stdout
    bare = Path(sys.base_prefix) / "bin" / "python3"  # no site-packages (-S): the helper alone
    before = tree(tmp_path)
    doctor_ = make("doctor", f"VENV={tmp_path / 'none'}", f"PYTHON={bare} -S", f"NVIDIA_SMI={smi}")
    assert f"No {tmp_path / 'none'} yet" in doctor_.stdout, doctor_.stdout + doctor_.stderr
    assert "make lab sets up the course (the gpu set: nvidia-smi lists GPU 0: Tesla P100" in (
        doctor_.stdout
    )
    assert "environment report" in doctor_.stdout and tree(tmp_path) == before


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
