"""The set-up cell on Colab, simulated: it installs the course helper (only) and asks for a GPU
runtime.

Each distinct set-up cell of the lessons runs in a fresh Python process with
Colab faked around it:

- Colab present = a ``google.colab`` module in ``sys.modules`` (what the cell tests);
- ``gpucourse`` hidden until the cell's ``pip install`` has run (as on a fresh Colab runtime);
- ``pip`` stubbed: the cell's arguments are recorded, then pip resolves the same request with the
  repository URL replaced by this checkout, ``--dry-run`` (nothing is installed, the network is not
  used), and its report says what would be installed;
- no GPU attached = ``CUDA_VISIBLE_DEVICES=""``, so it holds on a GPU machine too.

Checked: on Colab the cell installs ``gpucourse`` from the repository named in pyproject.toml before
it imports it, and nothing else (DALI may be added by a lesson that needs it; never torch,
torchvision or tensorflow, never ``--upgrade``); without a GPU the device choice prints Colab's
"Runtime > Change runtime type"; outside Colab it installs nothing and says how to get the helper
when it is missing.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import textwrap

import coursekit as ck
import pytest
from coursetools import colab_set

# Stands in for the kernel: hides gpucourse until pip ran, stubs pip, runs the cell; on Colab it
# starts with the course's stand-in Colab (coursetools.colab_set.FAKE_COLAB).
DRIVER = textwrap.dedent(
    r"""
    import importlib.abc, json, subprocess, sys
    hide = sys.argv[1] == "hide"
    root, report, cell = sys.argv[2:5]

    class NotInstalledYet(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] == "gpucourse":
                raise ModuleNotFoundError(f"No module named {name!r}", name=name)

    blocker = NotInstalledYet()
    if hide:
        sys.meta_path.insert(0, blocker)
    calls, real_run = [], subprocess.run

    def run(args, *more, **kwargs):
        if list(args[:3]) == [sys.executable, "-m", "pip"]:
            imported = "gpucourse" in sys.modules
            calls.append({"args": [str(a) for a in args[3:]], "gpucourse_imported": imported})
            url = __import__("re").compile(r"git\+https://\S+")
            # Resolve the helper from this checkout; other requirements (DALI) are checked by name
            # only, so the dry run needs neither the network nor DALI installed here.
            local = [url.sub("file://" + root, str(a)) for a in args[3:]]
            local = [a for a in local if a.startswith("-") or a == "install" or "file://" in a]
            dry = ["--dry-run", "--no-index", "--no-build-isolation", "--report", report]
            result = real_run([sys.executable, "-m", "pip", *local, *dry], *more, **kwargs)
            if blocker in sys.meta_path:
                sys.meta_path.remove(blocker)  # "installed"
            return result
        return real_run(args, *more, **kwargs)

    subprocess.run = run
    namespace = {"__name__": "__main__"}
    try:
        exec(compile(cell, "<set-up cell>", "exec"), namespace)
        error = None
    except Exception as e:
        error = f"{type(e).__name__}: {e}"
    device = str(namespace.get("device"))
    print("@@RESULT@@" + json.dumps({"pip": calls, "error": error, "device": device}))
    """
)
FRAMEWORKS = {"torch", "torchvision", "torchaudio", "tensorflow", "tensorflow-cpu", "keras", "jax"}
MAY_INSTALL = re.compile(r"gpucourse|nvidia-dali-cuda\d+|nvidia-dali-tf-plugin-cuda\d+")


CELLS = colab_set.setup_cells()  # the set-up cell of each lesson, as the Colab set runs them
IDS = [
    "+".join(lessons) if len(lessons) < 3 else f"{lessons[0]}-and-{len(lessons) - 1}-more"
    for lessons in CELLS.values()
]


def run_cell(
    source: str, tmp_path, *, colab: bool, hide: bool = True, gpu: bool = False
) -> tuple[dict, str]:
    env = ck.env()
    env.pop("GPUCOURSE_REQUIRE_GPU", None)
    if not gpu:
        env["CUDA_VISIBLE_DEVICES"] = ""  # no GPU attached to this runtime
    report = tmp_path / "pip-report.json"
    result = subprocess.run(
        [
            sys.executable,
            "-c",
            colab_set.FAKE_COLAB + DRIVER if colab else DRIVER,
            "hide" if hide else "show",
            str(ck.ROOT),
            str(report),
            source,
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    out, _, tail = result.stdout.rpartition("@@RESULT@@")
    assert result.returncode == 0 and tail, f"the driver failed:\n{result.stdout}\n{result.stderr}"
    outcome = json.loads(tail)
    outcome["installed"] = (
        [
            (item["metadata"]["name"], item["download_info"]["url"])
            for item in json.loads(report.read_text())["install"]
        ]
        if report.exists()
        else []
    )
    return outcome, out + result.stderr


def requirements(args: list[str]) -> list[str]:
    """The requirement arguments of `pip install ...` (not its options)."""
    assert args[0] == "install", f"the set-up cell runs `pip {args[0]}`"
    return [a for a in args[1:] if not a.startswith("-")]


def requirement_name(requirement: str) -> str:
    return re.split(r"[\s@=<>!~\[;]", requirement, maxsplit=1)[0].lower()


@pytest.mark.slow
@pytest.mark.parametrize("source", CELLS, ids=IDS)
def test_on_colab_it_installs_the_helper_only_and_asks_for_a_gpu(source, tmp_path):
    outcome, out = run_cell(source, tmp_path, colab=True)
    assert outcome["error"] is None, (
        f"the set-up cell failed on (simulated) Colab: {outcome['error']}\n{out}"
    )
    (call,) = outcome["pip"]
    assert not call["gpucourse_imported"], "install before importing gpucourse"
    args = call["args"]
    upgrades = {"-U", "--upgrade", "--force-reinstall", "--upgrade-strategy"} & set(args)
    assert not upgrades, f"never upgrade Colab's packages: {args}"
    wanted = requirements(args)
    assert f"gpucourse @ git+{ck.repository_url()}" in wanted, (
        f"gpucourse comes from the course repository: {wanted}"
    )
    for requirement in wanted:
        assert requirement_name(requirement) not in FRAMEWORKS, (
            f"Colab's own {requirement} must stay: {args}"
        )
        assert MAY_INSTALL.fullmatch(requirement_name(requirement)), (
            f"the set-up cell installs {requirement}"
        )
    installed = dict(outcome["installed"])
    assert installed.get("gpucourse") == f"file://{ck.ROOT}", (
        "pip resolved the helper from the (local) repository"
    )
    assert not set(installed) & FRAMEWORKS, f"pip would install a framework: {installed}"
    assert outcome["device"] == "cpu"
    assert "Runtime > Change runtime type" in out, (
        f"no GPU runtime: the cell must say how to attach one:\n{out}"
    )


@pytest.mark.slow
@pytest.mark.parametrize("source", CELLS, ids=IDS)
def test_outside_colab_it_installs_nothing(source, tmp_path):
    outcome, out = run_cell(source, tmp_path, colab=False, hide=False)
    assert outcome["error"] is None, outcome["error"]
    assert outcome["pip"] == [], "outside Colab the set-up cell installs nothing"
    assert outcome["device"] == "cpu" and "Falling back to the CPU" in out
    assert "Runtime > Change runtime type" not in out, "Colab's advice is for Colab only"


@pytest.mark.parametrize("source", CELLS, ids=IDS)
def test_outside_colab_without_the_helper_it_says_how_to_get_it(source, tmp_path):
    outcome, _ = run_cell(source, tmp_path, colab=False, hide=True)
    assert outcome["pip"] == []
    assert (
        outcome["error"]
        and outcome["error"].startswith("ModuleNotFoundError")
        and "make lab" in outcome["error"]
    )
