"""The helper stays plumbing: small, and every module serves at least two lessons
(CONTRIBUTING.md, "Tests": the helper's budgets).

A lesson writes the API it teaches in its own cells; `gpucourse` keeps what two or more lessons use,
plus the command-line tools and `launch`. Two budgets: the learner API (what lessons import) and the
command-line tools (`doctor`, `bench`, `__main__`), and no file over 300 lines. The size is counted
on the code as ruff formats it (100 columns, pyproject.toml), so packing lines never buys room. When
a test here fails it names the module and the lessons that use it.
"""

from __future__ import annotations

import ast
import re
import shutil
import subprocess
import sys
from pathlib import Path

import coursekit as ck
import pytest
import tomllib

PACKAGE = ck.ROOT / "utils" / "gpucourse"
# The command-line tools; every other module is the learner API
TOOLS = {"doctor", "bench", "__main__"}
# The budgets (CONTRIBUTING.md): lines of `ruff format`'s output, blank lines too, as `wc -l` counts
# them
BUDGETS = {"the learner API": 1600, "the command-line tools": 900}
MODULE_LINES = 300  # one file's most
# Exempt from "two lessons": the command-line tools, the package's own plumbing, and `launch`.
EXEMPT = {"__init__", "launch", *TOOLS}


def _files() -> dict[str, list[Path]]:
    """Each module (``launch``; a subpackage, ``doctor``, counts as one) -> its files."""
    files = {path.stem: [path] for path in sorted(PACKAGE.glob("*.py"))}
    for init in sorted(PACKAGE.glob("*/__init__.py")):
        files[init.parent.name] = sorted(init.parent.glob("*.py"))
    return files


def _modules() -> list[str]:
    return sorted(_files())


def _formatted_lines(path: Path, source: str | None = None) -> int:
    """The lines of ``path`` (or of ``source``, as if it were there) once ruff has formatted it with
    the project's settings."""
    ruff = shutil.which("ruff", path=str(Path(sys.executable).parent)) or shutil.which("ruff")
    if ruff is None:
        pytest.skip("ruff is not installed here: `pip install -e '.[course]'`")
    result = subprocess.run(
        [ruff, "format", "--stdin-filename", str(path), "-"],
        input=path.read_text() if source is None else source,
        cwd=ck.ROOT,
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, f"ruff cannot format {path.name}: {result.stderr}"
    return len(result.stdout.splitlines())


def _exports() -> dict[str, str]:
    """The lazy top-level names (`gpucourse.workload` -> "device") from __init__'s _EXPORTS
    table."""
    tree = ast.parse((PACKAGE / "__init__.py").read_text())
    for node in ast.walk(tree):
        target = getattr(node, "target", None) or (
            node.targets[0] if isinstance(node, ast.Assign) else None
        )
        if isinstance(target, ast.Name) and target.id == "_EXPORTS":
            return ast.literal_eval(node.value)
    raise AssertionError("gpucourse/__init__.py has no _EXPORTS table")


def _users() -> dict[str, set[str]]:
    """For each module, the lessons whose code cells reach it (`gpucourse.plots.`,
    `gpucourse.workload(`, imports)."""
    modules = set(_modules())
    exports = _exports()
    users: dict[str, set[str]] = {m: set() for m in modules}
    for lesson in ck.lessons():
        code = "\n".join(
            c.source for c in ck.read(ck.solution_path(lesson)).cells if c.cell_type == "code"
        )
        for name in re.findall(r"\bgpucourse\.(\w+)", code):
            module = name if name in modules else exports.get(name)
            if module:
                users[module].add(lesson)
        for line in re.findall(r"from gpucourse(?:\.(\w+))? import ([\w, ]+)", code):
            sub, names = line
            for name in [sub] if sub else [n.strip() for n in names.split(",")]:
                module = name if name in modules else exports.get(name)
                if module:
                    users[module].add(lesson)
    return users


@pytest.fixture(scope="module")
def lines() -> dict[Path, int]:
    return {path: _formatted_lines(path) for paths in _files().values() for path in paths}


@pytest.mark.parametrize("part", BUDGETS)
def test_the_helper_keeps_its_budgets(lines, part):
    tools = part == "the command-line tools"
    mine = {
        path: n
        for path, n in lines.items()
        if (path.relative_to(PACKAGE).parts[0].removesuffix(".py") in TOOLS) == tools
    }
    total = sum(mine.values())
    biggest = ", ".join(
        f"{path.relative_to(PACKAGE)} {n}"
        for path, n in sorted(mine.items(), key=lambda kv: -kv[1])[:5]
    )
    advice = "" if tools else ": move what one lesson uses into its cells"
    assert total <= BUDGETS[part], (
        f"{part} of gpucourse is {total} lines as ruff formats them, over its budget of "
        f"{BUDGETS[part]} (biggest: {biggest}){advice}"
    )


def test_no_module_is_long(lines):
    long = {str(path.relative_to(PACKAGE)): n for path, n in lines.items() if n > MODULE_LINES}
    assert not long, (
        f"gpucourse's files stay within {MODULE_LINES} lines as ruff formats them: {long}; split "
        "one concept's module into a package (as the doctor is)"
    )


def test_every_subpackage_is_installed():
    """A Colab set-up cell installs gpucourse with pip, not editable: setuptools installs only the
    packages pyproject.toml names, and a subpackage left out is missing there."""
    setuptools = tomllib.loads((ck.ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    found = {
        ".".join(("gpucourse", *init.parent.relative_to(PACKAGE).parts))
        for init in PACKAGE.rglob("__init__.py")
    }
    missing = sorted(found - set(setuptools["packages"]))
    assert not missing, f"pyproject.toml's [tool.setuptools] packages must name {missing}"


def test_packing_lines_buys_no_room():
    """The count is the formatter's: one packed line costs what ruff makes of it."""
    packed = "TABLE = {" + ", ".join(f"'key{i}': {i}" for i in range(40)) + "}\n"
    assert _formatted_lines(PACKAGE / "packed.py", packed) == 42


def test_every_module_serves_two_lessons():
    lonely = {m: sorted(u) for m, u in _users().items() if m not in EXEMPT and len(u) < 2}
    assert not lonely, (
        "a gpucourse module used by fewer than two lessons belongs in that lesson's cells "
        "(CONTRIBUTING.md): "
        + "; ".join(f"{m} used by {users or 'no lesson'}" for m, users in lonely.items())
    )


def _imports(path: Path, modules: set[str]) -> set[str]:
    """The package's modules that ``path`` imports anywhere in it (in functions too): `from .x
    import`, `from .. import x` in a subpackage, `gpucourse.x`, ..."""
    # the package ``path`` is in, as a dotted name: gpucourse, gpucourse.doctor
    here = ".".join(("gpucourse", *path.parent.relative_to(PACKAGE).parts))
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = here.split(".")[: len(here.split(".")) - node.level + 1]
                base = ".".join(filter(None, [*parent, base]))
            names = [base] if base != "gpucourse" else [f"gpucourse.{a.name}" for a in node.names]
        elif isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        else:
            continue
        for name in names:
            parts = name.split(".")
            if parts[0] == "gpucourse":
                found.add(parts[1] if len(parts) > 1 and parts[1] in modules else "__init__")
    return found & modules


def test_no_import_circle_among_the_helper_modules():
    modules = set(_modules())
    graph = {
        m: set().union(*(_imports(path, modules) for path in paths)) - {m}
        for m, paths in _files().items()
    }

    def circle(module: str, path: list[str]) -> list[str] | None:
        if module in path:
            return path[path.index(module) :] + [module]
        return next(
            (found for nxt in sorted(graph[module]) if (found := circle(nxt, path + [module]))),
            None,
        )

    circles = [c for m in sorted(graph) if (c := circle(m, []))]
    assert not circles, (
        f"gpucourse's modules import each other in a circle: {' -> '.join(circles[0])}: move what "
        "both use"
    )
