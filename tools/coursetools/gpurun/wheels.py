"""The offline set-up on the GPU machine (`--setup`): what the suite lacks beside the machine's own
PyTorch, from the index or a folder of wheels (`--wheelhouse`), never replacing that PyTorch.

The suite: the lessons' small packages, nbval and its kernel, and autograde's stack: nbgrader and
jupyter_server without their dependencies (their user interface, JupyterLab and the notebook server,
is never imported by `nbgrader autograde`), plus exactly what autograde imports
(tests/gpu/test_gpu_kit.py proves it by grading offline in a stand-in machine). The wheels for a
machine without internet are gathered online by coursetools.gpukit."""

from __future__ import annotations

import importlib.metadata
import importlib.util
import re
import subprocess
import sys
import sysconfig
import tempfile
from pathlib import Path

from ..course import ROOT
from ..pins import course_pins, package_name
from .preflight import managed_problem

LESSONS = ("numpy", "pillow", "matplotlib", "tqdm", "nvidia-ml-py")
RUNNER = ("pytest", "nbval", "ipykernel", "nbformat", "nbclient")
# What `nbgrader autograde` and the course's grading code import (with their own dependencies).
AUTOGRADE = tuple(
    "nbconvert jupyter-client jupyter-core traitlets sqlalchemy alembic python-dateutil jinja2 "
    "jsonschema pyyaml rapidfuzz requests prometheus-client setuptools tornado".split()
)
NO_DEPS = ("nbgrader", "jupyter-server")  # installed without their dependencies
SUITE = LESSONS + RUNNER + AUTOGRADE
# Present distributions --setup never replaces: pinned at their versions in pip's constraints.
KEEP = re.compile(
    r"(torch|torchvision|torchaudio|triton|pytorch-triton.*|nvidia-(?!ml-py).*|tensorflow.*|tf-keras|keras"
    r"|jax|jaxlib|tensorrt.*|cupy.*|numpy)"
)


def pinned(names: tuple[str, ...]) -> list[str]:
    """``names`` at the course's pins where it pins them (the suite names no framework)."""
    pins = {package_name(r): r.split(";")[0].strip() for r in course_pins() if "==" in r}
    return [pins.get(package_name(name), name) for name in names]


def installed_distributions() -> dict[str, str]:
    """This Python's distributions, name -> version (the first on sys.path wins, as imports do)."""
    found: dict[str, str] = {}
    for dist in importlib.metadata.distributions():
        if dist.metadata["Name"]:
            found.setdefault(package_name(dist.metadata["Name"]), dist.version)
    return found


def setup_plan(
    installed: dict[str, str],
    requirements: list[str],
    no_deps: list[str],
    constraints: str,
    wheelhouse: str | None = None,
    python: str = sys.executable,
) -> tuple[list[list[str]], str]:
    """The pip commands adding what this environment lacks (none: no command), and the text of the
    file ``constraints`` they read: it keeps PyTorch, TensorFlow, the CUDA libraries and NumPy at
    their present versions."""
    keep = sorted((n, v) for n, v in installed.items() if KEEP.fullmatch(n))
    index = ["--no-index", "--find-links", str(wheelhouse)] if wheelhouse else []
    pip = [python, "-m", "pip", "install", "--disable-pip-version-check", *index]
    commands = []
    missing = [r for r in requirements if package_name(r) not in installed]
    if missing:
        commands.append([*pip, "--constraint", constraints, *missing])
    missing = [r for r in no_deps if package_name(r) not in installed]
    if missing:
        commands.append([*pip, "--no-deps", *missing])
    return commands, "".join(f"{name}=={version}\n" for name, version in keep)


def setup(wheelhouse: str | None = None, requirements: Path | None = None) -> int:
    """Add what the suite needs to this Python's environment (or ``requirements``, a file), beside
    its PyTorch and never replacing it; gpucourse and coursetools from this checkout, as an
    editable install adds them."""

    def stop(why: str, status: int = 2) -> int:
        print(f"make test-gpu: {why}", file=sys.stderr)
        return status

    before = installed_distributions()
    if "torch" not in before:
        return stop(f"{sys.executable} has no PyTorch: name a Python with a CUDA PyTorch (PYTHON=)")
    if wheelhouse and not Path(wheelhouse).is_dir():
        return stop(f"the wheelhouse {wheelhouse} is not a folder (`make wheelhouse` makes it)")
    suite, bare = pinned(SUITE), pinned(NO_DEPS)
    if requirements:
        suite, bare = [s.strip() for s in requirements.read_text().splitlines() if s.strip()], []
    with tempfile.TemporaryDirectory(prefix="gpucourse-setup-") as tmp:
        constraints = Path(tmp) / "constraints.txt"
        commands, keep = setup_plan(before, suite, bare, str(constraints), wheelhouse)
        constraints.write_text(keep, encoding="utf-8")
        managed = managed_problem()
        if commands and managed:
            problem = f"the machine's problem: {managed['problem']}."
            return stop(f"{problem}\n  what to do: {managed['fix']}.")
        for command in commands:
            print("$ " + " ".join(command), flush=True)
            if subprocess.run(command).returncode != 0:
                offline = " (offline: is every wheel in the wheelhouse?)" if wheelhouse else ""
                kept = f"PyTorch {before['torch']} is kept as it is{offline}"
                return stop(f"adding the suite's packages failed; {kept}.", 1)
    spec = importlib.util.find_spec("gpucourse")
    if spec is None:
        try:
            pth = Path(sysconfig.get_paths()["purelib"]) / "gpucourse-checkout.pth"
            pth.write_text(f"{ROOT / 'utils'}\n{ROOT / 'tools'}\n")
        except OSError as error:
            return stop(f"cannot add gpucourse here ({error}): use a venv (PYTHON=ENV/bin/python)")
    elif Path(spec.origin or "").parent.parent != ROOT / "utils":
        print(f"note: the gpucourse at {spec.origin} is not this checkout's; grading imports it")
    after = installed_distributions()
    pinned_here = {n: v for n, v in before.items() if KEEP.fullmatch(n)}
    changed = {n: (v, after.get(n)) for n, v in pinned_here.items() if after.get(n) != v}
    added, same = sorted(set(after) - set(before)), "PyTorch and CUDA libraries as they were"
    kept = f"CHANGED, though pinned: {changed}" if changed else same
    names = ", ".join(added) or "none missing"
    print(f"added {len(added)} package(s) ({names}) beside PyTorch {after.get('torch')}; {kept}")
    return 1 if changed else 0
