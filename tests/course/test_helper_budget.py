"""The helper stays plumbing: small, and every module serves at least two lessons
(CONTRIBUTING.md, "The helper").

A lesson writes the API it teaches in its own cells; `gpucourse` keeps what two or more lessons use,
plus the command-line tools and `launch`. The size is counted on the code as ruff formats it (100
columns, pyproject.toml), so packing lines never buys room. When a test here fails it names the
module and the lessons that use it.
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

PACKAGE = ck.ROOT / "utils" / "gpucourse"
# The budget for the whole package (CONTRIBUTING.md): lines of `ruff format`'s output, blank lines
# too, as `wc -l` counts them
BUDGET_LINES = 2200
# Exempt from "two lessons": the command-line tools, the package's own plumbing, and `launch`.
EXEMPT = {"__init__", "__main__", "doctor", "bench", "launch"}


def _modules() -> list[str]:
    return [path.stem for path in sorted(PACKAGE.glob("*.py"))]


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


def test_the_helper_keeps_its_budget():
    lines = {path.stem: _formatted_lines(path) for path in sorted(PACKAGE.glob("*.py"))}
    total = sum(lines.values())
    biggest = ", ".join(f"{m} {n}" for m, n in sorted(lines.items(), key=lambda kv: -kv[1])[:5])
    assert total <= BUDGET_LINES, (
        f"gpucourse is {total} lines as ruff formats it, over the course's budget of "
        f"{BUDGET_LINES} (biggest: {biggest}): move what one lesson uses into its cells"
    )


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


def _imports(tree: ast.AST, modules: set[str]) -> set[str]:
    """The package's modules a module imports anywhere in it (in functions too): `from .x
    import`, `gpucourse.x`, ..."""
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (
            node.level or (node.module or "").split(".")[0] == "gpucourse"
        ):
            base = (
                (node.module or "").removeprefix("gpucourse").strip(".")
                if not node.level
                else node.module or ""
            )
            found |= (
                {base.split(".")[0]}
                if base
                else {a.name if a.name in modules else "__init__" for a in node.names}
            )
        elif isinstance(node, ast.Import):
            names = [a.name.split(".") for a in node.names if a.name.split(".")[0] == "gpucourse"]
            found |= {name[1] if len(name) > 1 else "__init__" for name in names}
    return found & modules


def test_no_import_circle_among_the_helper_modules():
    modules = set(_modules())
    graph = {
        m: _imports(ast.parse((PACKAGE / f"{m}.py").read_text()), modules) - {m} for m in modules
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
