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


def setup(wheelhouse: str | None = None, requirements: list[str] | None = None) -> int:
    """Add what the suite needs to this Python's environment, beside its PyTorch and never replacing
    it; gpucourse and coursetools from this checkout, as an editable install adds them."""
    from .preflight import managed_problem

    def stop(why: str, status: int = 2) -> int:
        print(f"make test-gpu: {why}", file=sys.stderr)
        return status

    before = installed_distributions()
    if "torch" not in before:
        return stop(f"{sys.executable} has no PyTorch: name a Python with a CUDA PyTorch (PYTHON=)")
    if wheelhouse and not Path(wheelhouse).is_dir():
        return stop(f"the wheelhouse {wheelhouse} is not a folder (`make wheelhouse` makes it)")
    suite = suite_requirements() if requirements is None else requirements
    bare = no_deps_requirements() if requirements is None else []
    commands, constraints = setup_plan(before, suite, wheelhouse, no_deps=bare)
    managed = managed_problem()
    if commands and managed:
        return stop(
            f"the machine's problem: {managed['problem']}.\n  what to do: {managed['fix']}."
        )
    with tempfile.TemporaryDirectory(prefix="gpucourse-setup-") as tmp:
        (Path(tmp) / "constraints.txt").write_text(constraints, encoding="utf-8")
        for command in commands:
            command = [f"{tmp}/constraints.txt" if p == "{constraints}" else p for p in command]
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
    kept = {
        n: (v, after.get(n)) for n, v in before.items() if KEEP.fullmatch(n) and after.get(n) != v
    }
    added = sorted(set(after) - set(before))
    names = ", ".join(added) or "none missing"
    print(f"added {len(added)} package(s) ({names}) beside PyTorch {after.get('torch')}", end="")
    print(
        f"; CHANGED, though pinned: {kept}" if kept else "; PyTorch and CUDA libraries as they were"
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
    pip = [sys.executable, "-m", "pip", "download", "--disable-pip-version-check"]
    pip += ["--only-binary=:all:", "--dest", str(dest), *target]
    if requirements is not None:
        return [[*pip, *requirements]]
    suite = [r for r in suite_requirements() if canonical(r) not in have]
    bare = [r for r in no_deps_requirements() if canonical(r) not in have]
    found = (([*pip, *suite], suite), ([*pip, "--no-deps", *bare], bare))
    return [command for command, wanted in found if wanted]


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
