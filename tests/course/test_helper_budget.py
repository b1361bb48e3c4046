"""The helper stays plumbing: small, and every module serves at least two lessons (COURSE.md,
CONTRIBUTING.md).

A lesson writes the API it teaches in its own cells; `gpucourse` keeps what two or more lessons use,
plus the command-line tools and `launch`. When this test fails it names the module and the lessons
that use it.
"""

from __future__ import annotations

import ast
import re

import coursekit as ck

PACKAGE = ck.ROOT / "utils" / "gpucourse"
# COURSE.md's budget for the whole package, counted as `wc -l` does (blank lines too)
BUDGET_LINES = 1300
# Exempt from "two lessons": the command-line tools, the package's own plumbing, and `launch`
# (COURSE.md).
EXEMPT = {"__init__", "__main__", "doctor", "bench", "launch"}


def _modules() -> dict[str, int]:
    return {p.stem: len(p.read_text().splitlines()) for p in sorted(PACKAGE.glob("*.py"))}


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
    modules, exports = set(_modules()), _exports()
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
    lines = _modules()
    total = sum(lines.values())
    biggest = ", ".join(f"{m} {n}" for m, n in sorted(lines.items(), key=lambda kv: -kv[1])[:5])
    assert total <= BUDGET_LINES, (
        f"gpucourse is {total} lines, over the course's budget of {BUDGET_LINES} (biggest: "
        f"{biggest}): "
        "move what one lesson uses into its cells"
    )


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
