"""The suite's wheels: what a GPU machine lacks beside its own PyTorch, gathered online (`make
wheelhouse`) and installed offline (`--setup`), never replacing that PyTorch.

The suite: the lessons' small packages, nbval and its kernel, and autograde's stack: nbgrader and
jupyter_server without their dependencies (their user interface, JupyterLab and the notebook server,
is never imported by `nbgrader autograde`), plus exactly what autograde imports
(tests/gpu/test_gpu_kit.py proves it by grading offline in a stand-in machine)."""

from __future__ import annotations

import importlib.metadata
import importlib.util
import re
import subprocess
import sys
import sysconfig
import tempfile
from pathlib import Path

from .steps import ROOT

LESSONS = ("numpy", "pillow", "matplotlib", "tqdm", "nvidia-ml-py")
RUNNER = ("pytest", "nbval", "ipykernel", "nbformat", "nbclient")
# What `nbgrader autograde` and the course's grading code import (with their own dependencies).
AUTOGRADE = (
    "nbconvert",
    "jupyter-client",
    "jupyter-core",
    "traitlets",
    "sqlalchemy",
    "alembic",
    "python-dateutil",
    "jinja2",
    "jsonschema",
    "pyyaml",
    "rapidfuzz",
    "requests",
    "prometheus-client",
    "setuptools",
    "tornado",
)
NO_DEPS = ("nbgrader", "jupyter-server")  # installed without their dependencies
SUITE = LESSONS + RUNNER + AUTOGRADE
# Present distributions --setup never replaces: pinned at their versions in pip's constraints.
KEEP = re.compile(
    r"(torch|torchvision|torchaudio|triton|pytorch-triton.*|nvidia-(?!ml-py).*|tensorflow.*|tf-keras|keras"
    r"|jax|jaxlib|tensorrt.*|cupy.*|numpy)"
)


def canonical(requirement: str) -> str:
    """The normalized (PEP 503) name of a requirement, a bare name or a wheel's name
    (coursetools.pins)."""
    from .. import pins

    return pins.package_name(requirement)


def _pinned(names: tuple[str, ...], pins: dict[str, str] | None) -> list[str]:
    if pins is None:
        from .. import pins as course

        pins = {canonical(r): r.split(";")[0].strip() for r in course.course_pins() if "==" in r}
    return [pins.get(canonical(name), name) for name in names]


def suite_requirements(pins: dict[str, str] | None = None) -> list[str]:
    """What the suite adds beside PyTorch, at the course's pins where it pins them (never a
    framework)."""
    return _pinned(SUITE, pins)


def no_deps_requirements(pins: dict[str, str] | None = None) -> list[str]:
    return _pinned(NO_DEPS, pins)


def have_names(path: Path) -> set[str]:
    """The names in a `pip freeze` or a list of names (one a line, `#` comments)."""
    lines = Path(path).read_text(encoding="utf-8").splitlines()
    found = {line.split("#")[0].strip() for line in lines}
    return {canonical(line) for line in found if line and not line.startswith("-")}


def installed_distributions() -> dict[str, str]:
    """This Python's distributions, name -> version (the first on sys.path wins, as imports do)."""
    found: dict[str, str] = {}
    for dist in importlib.metadata.distributions():
        if dist.metadata["Name"]:
            found.setdefault(canonical(dist.metadata["Name"]), dist.version)
    return found


def setup_plan(
    installed: dict[str, str],
    requirements: list[str],
    wheelhouse: str | None = None,
    python: str = sys.executable,
    no_deps: list[str] = (),
) -> tuple[list[list[str]], str]:
    """The pip commands adding what this environment lacks (none: no command), and the constraints
    that keep its PyTorch, TensorFlow, CUDA libraries and NumPy at their present versions."""
    keep = sorted((n, v) for n, v in installed.items() if KEEP.fullmatch(n))
    constraints = "".join(f"{name}=={version}\n" for name, version in keep)
    index = ["--no-index", "--find-links", str(wheelhouse)] if wheelhouse else []
    pip = [python, "-m", "pip", "install", "--disable-pip-version-check", *index]
    commands = []
    missing = [r for r in requirements if canonical(r) not in installed]
    if missing:
        commands.append([*pip, "--constraint", "{constraints}", *missing])
    missing = [r for r in no_deps if canonical(r) not in installed]
    if missing:
        commands.append([*pip, "--no-deps", *missing])
    return commands, constraints


def _add_checkout(purelib: str) -> str | None:
    """gpucourse and coursetools from this checkout, as an editable install adds them; None or why
    not."""
    try:
        (Path(purelib) / "gpucourse-checkout.pth").write_text(
            f"{ROOT / 'utils'}\n{ROOT / 'tools'}\n"
        )
    except OSError as error:
        return (
            f"cannot add gpucourse to {sys.executable}'s environment ({error}); a read-only site "
            "install can "
            "be extended by a venv: `python -m venv --system-site-packages ENV`, then "
            "PYTHON=ENV/bin/python"
        )
    return None


def setup(wheelhouse: str | None = None, requirements: list[str] | None = None) -> int:
    """Add what the suite needs to this Python's environment, beside its PyTorch and never replacing
    it."""
    from .preflight import managed_problem

    before = installed_distributions()
    if "torch" not in before:
        print(
            f"{sys.executable} has no PyTorch: `make test-gpu ENV=system` (or PYTHON=...) needs a "
            "Python "
            "whose environment has a CUDA PyTorch; without ENV and PYTHON, `make test-gpu` builds "
            ".venv "
            "instead.",
            file=sys.stderr,
        )
        return 2
    if wheelhouse and not Path(wheelhouse).is_dir():
        print(
            f"the wheelhouse {wheelhouse} is not a folder: `make wheelhouse "
            f"WHEELHOUSE={wheelhouse}` makes it",
            file=sys.stderr,
        )
        return 2
    suite = suite_requirements() if requirements is None else requirements
    commands, constraints = setup_plan(
        before, suite, wheelhouse, no_deps=no_deps_requirements() if requirements is None else []
    )
    managed = managed_problem()
    if commands and managed:
        print(
            f"make test-gpu: the machine's problem: {managed['problem']}.\n  what to do: "
            f"{managed['fix']}.",
            file=sys.stderr,
        )
        return 2
    with tempfile.TemporaryDirectory(prefix="gpucourse-setup-") as tmp:
        (Path(tmp) / "constraints.txt").write_text(constraints, encoding="utf-8")
        for command in commands:
            command = [
                str(Path(tmp) / "constraints.txt") if p == "{constraints}" else p for p in command
            ]
            print("$ " + " ".join(command), flush=True)
            if subprocess.run(command).returncode != 0:
                offline = " (offline: is every wheel in the wheelhouse?)" if wheelhouse else ""
                print(
                    "make test-gpu: adding the suite's packages failed; this environment's "
                    "PyTorch "
                    f"{before['torch']} is kept as it is{offline}.",
                    file=sys.stderr,
                )
                return 1
    spec = importlib.util.find_spec("gpucourse")
    if spec is None:
        problem = _add_checkout(sysconfig.get_paths()["purelib"])
        if problem:
            print(problem, file=sys.stderr)
            return 2
    elif Path(spec.origin or "").parent.parent != ROOT / "utils":
        print(
            f"note: the gpucourse at {spec.origin} is not this checkout's; the grading run "
            "imports that one"
        )
    after = installed_distributions()
    kept = {
        n: (v, after.get(n)) for n, v in before.items() if KEEP.fullmatch(n) and after.get(n) != v
    }
    added = sorted(set(after) - set(before))
    print(
        f"added {len(added)} package(s) ({', '.join(added) or 'none missing'}) beside PyTorch "
        f"{after.get('torch')}"
        + (
            f"; CHANGED, though pinned: {kept}"
            if kept
            else "; PyTorch and its CUDA libraries are as they were"
        )
    )
    return 1 if kept else 0


def platforms(platform: str) -> list[str]:
    """``platform`` and the older ones a machine of that platform runs: pip takes
    `manylinux_2_28_x86_64` literally (it widens only `manylinux2014_*` and `manylinux2010_*`),
    while most wheels are manylinux2014."""
    found = re.fullmatch(r"manylinux_2_(\d+)_(\w+)", platform)
    if not found:
        return [platform]
    glibc, arch = int(found.group(1)), found.group(2)
    legacy = {17: "manylinux2014", 12: "manylinux2010", 5: "manylinux1"}
    return [f"manylinux_2_{minor}_{arch}" for minor in range(glibc, 4, -1)] + [
        f"{name}_{arch}" for minor, name in legacy.items() if minor <= glibc
    ]


def download_commands(
    dest: str,
    python_version: str | None = None,
    platform: str | None = None,
    requirements: list[str] | None = None,
    have: set[str] = frozenset(),
) -> list[list[str]]:
    """`pip download` of the suite's wheels (and theirs), then nbgrader's without theirs, binary
    only; what ``have`` names is not asked for (its dependencies still come: prune() takes out those
    the machine has)."""
    target = ["--python-version", python_version] if python_version else []
    for name in platforms(platform) if platform else []:
        target += ["--platform", name]
    pip = [
        sys.executable,
        "-m",
        "pip",
        "download",
        "--disable-pip-version-check",
        "--only-binary=:all:",
    ]
    pip += ["--dest", str(dest), *target]
    if requirements is not None:
        return [[*pip, *requirements]]
    suite = [r for r in suite_requirements() if canonical(r) not in have]
    bare = [r for r in no_deps_requirements() if canonical(r) not in have]
    return [
        command
        for command, wanted in (([*pip, *suite], suite), ([*pip, "--no-deps", *bare], bare))
        if wanted
    ]


def prune(wheelhouse: Path, have: set[str]) -> list[str]:
    """Take out the wheels of what the target machine already has; the names taken out."""
    removed = []
    for wheel in sorted(Path(wheelhouse).glob("*.whl")):
        if canonical(wheel.name.split("-")[0]) in have:
            wheel.unlink()
            removed.append(wheel.name)
    return removed


def size_mib(folder: Path) -> float:
    return sum(p.stat().st_size for p in Path(folder).rglob("*") if p.is_file()) / 2**20
