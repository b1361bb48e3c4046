"""The set-up cell on Colab, simulated: it installs the course helper (only) and asks for a GPU
runtime.

Each distinct set-up cell of the lessons runs with Colab faked around it, as a fresh kernel would
run it. One Python process a case (on Colab; outside it) runs every cell in turn, so PyTorch is
imported once a case, not once a cell: before each cell it forgets every ``gpucourse`` module and
puts the stand-in Colab in place or takes it away:

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
from pathlib import Path

import coursekit as ck
import pytest
from coursetools import colab_set
from coursetools.release import version as helper_version

# Stands in for the kernel, once per case (stdin: a JSON list of {cell, colab, hide}): forgets
# gpucourse, puts the course's stand-in Colab (coursetools.colab_set.FAKE_COLAB) in place or takes
# it away, hides gpucourse until pip ran, stubs pip, runs the cell.
DRIVER = colab_set.FAKE_COLAB + textwrap.dedent(
    r"""
    import importlib.abc, json, re, subprocess
    root, reports = sys.argv[1:3]
    colab_module = sys.modules.pop("google.colab")

    class NotInstalledYet(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] == "gpucourse":
                raise ModuleNotFoundError(f"No module named {name!r}", name=name)

    blocker, real_run, URL = NotInstalledYet(), subprocess.run, re.compile(r"git\+https://\S+")

    def run(args, *more, **kwargs):
        if list(args[:3]) == [sys.executable, "-m", "pip"]:
            imported = "gpucourse" in sys.modules
            calls.append({"args": [str(a) for a in args[3:]], "gpucourse_imported": imported})
            # Resolve the helper from this checkout; other requirements (DALI) are checked by name
            # only, so the dry run needs neither the network nor DALI installed here.
            local = [URL.sub("file://" + root, str(a)) for a in args[3:]]
            local = [a for a in local if a.startswith("-") or a == "install" or "file://" in a]
            dry = ["--dry-run", "--no-index", "--no-build-isolation", "--report", report]
            result = real_run([sys.executable, "-m", "pip", *local, *dry], *more, **kwargs)
            if blocker in sys.meta_path:
                sys.meta_path.remove(blocker)  # "installed"
            return result
        return real_run(args, *more, **kwargs)

    subprocess.run = run
    for number, case in enumerate(json.load(sys.stdin)):
        for name in [n for n in sys.modules if n.split(".")[0] == "gpucourse"]:
            del sys.modules[name]  # a fresh kernel has not imported it
        if case["colab"]:
            sys.modules["google.colab"] = colab_module
        else:
            sys.modules.pop("google.colab", None)
        if case["hide"] and blocker not in sys.meta_path:
            sys.meta_path.insert(0, blocker)
        elif not case["hide"] and blocker in sys.meta_path:
            sys.meta_path.remove(blocker)
        calls, report = [], f"{reports}/pip-report-{number}.json"
        print("@@CASE@@", flush=True)
        namespace = {"__name__": "__main__"}
        try:
            exec(compile(case["cell"], "<set-up cell>", "exec"), namespace)
            error = None
        except Exception as e:
            error = f"{type(e).__name__}: {e}"
        device = str(namespace.get("device"))
        result = {"pip": calls, "error": error, "device": device, "report": report}
        print("@@RESULT@@" + json.dumps(result), flush=True)
    """
)
FRAMEWORKS = {"torch", "torchvision", "torchaudio", "tensorflow", "tensorflow-cpu", "keras", "jax"}
MAY_INSTALL = re.compile(r"gpucourse|nvidia-dali-cuda\d+|nvidia-dali-tf-plugin-cuda\d+")


CELLS = colab_set.setup_cells()  # the set-up cell of each lesson, as the Colab set runs them
IDS = [
    "+".join(lessons) if len(lessons) < 3 else f"{lessons[0]}-and-{len(lessons) - 1}-more"
    for lessons in CELLS.values()
]
ON_COLAB = {"colab": True, "hide": True}  # a fresh Colab runtime: no gpucourse until pip ran
OUTSIDE = {"colab": False, "hide": False}  # JupyterLab from `make lab`: gpucourse installed


def run_cells(cases: list[dict], tmp_path, *, gpu: bool = False) -> list[tuple[dict, str]]:
    """Each case ({cell, colab, hide}) in turn in one driver process: (outcome, what it printed)
    for each."""
    env = ck.env()
    env.pop("GPUCOURSE_REQUIRE_GPU", None)
    if not gpu:
        env["CUDA_VISIBLE_DEVICES"] = ""  # no GPU attached to this runtime
    result = subprocess.run(
        [sys.executable, "-u", "-c", DRIVER, str(ck.ROOT), str(tmp_path)],
        input=json.dumps(cases),
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,  # in order: what a case printed and warned stays with it
        text=True,
        timeout=300,
    )
    runs = result.stdout.split("@@CASE@@\n")[1:]
    assert result.returncode == 0 and len(runs) == len(cases) and "@@RESULT@@" in runs[-1], (
        f"the driver failed:\n{result.stdout}"
    )
    outcomes = []
    for text in runs:
        out, _, tail = text.rpartition("@@RESULT@@")
        outcome = json.loads(tail)
        report = Path(outcome.pop("report"))
        outcome["installed"] = (
            [
                (item["metadata"]["name"], item["download_info"]["url"])
                for item in json.loads(report.read_text())["install"]
            ]
            if report.exists()
            else []
        )
        outcomes.append((outcome, out))
    return outcomes


def requirements(args: list[str]) -> list[str]:
    """The requirement arguments of `pip install ...` (not its options)."""
    assert args[0] == "install", f"the set-up cell runs `pip {args[0]}`"
    return [a for a in args[1:] if not a.startswith("-")]


def requirement_name(requirement: str) -> str:
    return re.split(r"[\s@=<>!~\[;]", requirement, maxsplit=1)[0].lower()


@pytest.mark.slow
def test_on_colab_it_installs_the_helper_only_and_asks_for_a_gpu(tmp_path):
    ran = run_cells([{"cell": cell, **ON_COLAB} for cell in CELLS], tmp_path)
    for lessons, (outcome, out) in zip(CELLS.values(), ran, strict=True):
        on = f"the set-up cell of {', '.join(lessons)}"
        assert outcome["error"] is None, (
            f"{on} failed on (simulated) Colab: {outcome['error']}\n{out}"
        )
        (call,) = outcome["pip"]
        assert not call["gpucourse_imported"], f"{on}: install before importing gpucourse"
        args = call["args"]
        upgrades = {"-U", "--upgrade", "--force-reinstall", "--upgrade-strategy"} & set(args)
        assert not upgrades, f"{on}: never upgrade Colab's packages: {args}"
        wanted = requirements(args)
        release = f"gpucourse @ git+{ck.repository_url()}@v{helper_version()}"
        assert release in wanted, (
            f"{on}: gpucourse comes from the course repository at its release tag: {wanted}"
        )
        for requirement in wanted:
            assert requirement_name(requirement) not in FRAMEWORKS, (
                f"{on}: Colab's own {requirement} must stay: {args}"
            )
            assert MAY_INSTALL.fullmatch(requirement_name(requirement)), (
                f"{on} installs {requirement}"
            )
        installed = dict(outcome["installed"])
        assert installed.get("gpucourse") == f"file://{ck.ROOT}", (
            f"{on}: pip resolved the helper from the (local) repository"
        )
        assert not set(installed) & FRAMEWORKS, f"{on}: pip would install a framework: {installed}"
        assert outcome["device"] == "cpu", on
        assert "Runtime > Change runtime type" in out, (
            f"{on}: no GPU runtime: the cell must say how to attach one:\n{out}"
        )


@pytest.mark.slow
def test_outside_colab_it_installs_nothing(tmp_path):
    ran = run_cells([{"cell": cell, **OUTSIDE} for cell in CELLS], tmp_path)
    for lessons, (outcome, out) in zip(CELLS.values(), ran, strict=True):
        on = f"the set-up cell of {', '.join(lessons)}"
        assert outcome["error"] is None, f"{on}: {outcome['error']}"
        assert outcome["pip"] == [], f"{on}: outside Colab the set-up cell installs nothing"
        assert outcome["device"] == "cpu" and "Falling back to the CPU" in out, f"{on}:\n{out}"
        assert "Runtime > Change runtime type" not in out, f"{on}: Colab's advice is for Colab only"


@pytest.mark.parametrize("source", CELLS, ids=IDS)
def test_outside_colab_without_the_helper_it_says_how_to_get_it(source, tmp_path):
    # its own process: the cell stops at `import gpucourse`, before PyTorch is imported
    ((outcome, _),) = run_cells([{"cell": source, "colab": False, "hide": True}], tmp_path)
    assert outcome["pip"] == []
    assert (
        outcome["error"]
        and outcome["error"].startswith("ModuleNotFoundError")
        and "make lab" in outcome["error"]
    )
