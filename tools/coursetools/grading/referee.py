"""What a learner's answer cells may not touch: the referee a test judges with.

Answer cells and test cells share one kernel, so an answer cell could rebind what a later test
judges with: a function or class a read-only cell defined (lesson 09's ``Watch``, ``BatchLog``), a
function of a module the tests read (``torch.cuda.synchronize``, ``time.perf_counter``,
``warnings.warn``, ``sys.modules``). Autograde restores the read-only cells, not the kernel's state
after an answer, so ``flags(nb)`` reads every answer cell (statically: what it would do at run time
needs no run) and names each such rebinding, with its cell and line; the class table and report show
them. A setting is no rebinding: ``torch.backends.cudnn.benchmark = True`` sets a flag the lesson
teaches, and only a module attribute that holds a function, a class or a module (or that does not
exist) is a referee. A patch hidden in ``exec`` or a computed ``getattr`` is beyond a static read:
the flag column is a lead for the instructor, never a score.
"""

from __future__ import annotations

import ast
import importlib
import inspect

from coursetools.text import cell_python

# The modules a test judges with; their callables are the referee's.
MODULES = ("torch", "time", "warnings", "sys", "builtins", "gc", "os", "gpucourse", "numpy")
PATCHERS = {"patch", "object", "setattr", "delattr", "setitem"}  # unittest.mock.patch.object, ...


def _defined(code: str) -> set[str]:
    """The functions and classes a cell defines at its top level."""
    try:
        tree = ast.parse(cell_python(code))
    except SyntaxError:
        return set()
    kinds = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
    return {node.name for node in tree.body if isinstance(node, kinds)}


def _dotted(node: ast.AST) -> str | None:
    """``a.b.c`` for an attribute chain of names, else None."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        return ".".join([node.id, *reversed(parts)])
    return None


def _module_referee(path: str, aliases: dict[str, str]) -> bool:
    """Whether ``path`` (``time.perf_counter``, ``torch.backends.cudnn.benchmark``) names a
    function, class or module of a judged module, or an attribute it does not have."""
    root, *rest = path.split(".")
    module = aliases.get(root, root)
    if module.split(".")[0] not in MODULES or not rest:
        return False
    try:
        value = importlib.import_module(module)
        for name in rest:
            value = getattr(value, name)
    except (ImportError, AttributeError):
        return True
    return callable(value) or inspect.ismodule(value)


def _targets(node: ast.AST) -> list[ast.AST]:
    """What a statement binds or changes: assignment and deletion targets, `setattr`'s object."""
    if isinstance(node, ast.Assign):
        return list(node.targets)
    if isinstance(node, (ast.AugAssign, ast.AnnAssign)):
        return [node.target]
    if isinstance(node, ast.Delete):
        return list(node.targets)
    if isinstance(node, ast.Call):
        name = _dotted(node.func) or ""
        if name.split(".")[-1] in PATCHERS and node.args:
            first = node.args[0]
            if isinstance(first, ast.Constant) and isinstance(first.value, str):
                try:  # mock.patch("time.time")
                    return [ast.parse(first.value, mode="eval").body]
                except SyntaxError:
                    return []
            field = node.args[1] if len(node.args) > 1 else None
            if isinstance(field, ast.Constant) and isinstance(field.value, str):
                return [ast.Attribute(value=first, attr=field.value)]
            return [ast.Attribute(value=first, attr="?")]
    return []


def answer_flags(code: str, referee: set[str], aliases: dict[str, str]) -> list[tuple[int, str]]:
    """(line, what) for each rebinding of the referee in one answer cell's code."""
    try:
        tree = ast.parse(cell_python(code))
    except SyntaxError:
        return []
    found = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            if node.name in referee and node in tree.body:
                found.append((node.lineno, f"defines {node.name} again"))
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            for alias in node.names:
                if (alias.asname or alias.name) in referee:
                    found.append((node.lineno, f"imports over {alias.asname or alias.name}"))
        for target in _targets(node):
            keyed = isinstance(target, ast.Subscript)
            while isinstance(target, ast.Subscript):  # Watch.__dict__["x"] = ..., sys.modules[...]
                target = target.value
            name = _dotted(target)
            if not name:
                continue
            root, top = name.split(".")[0], node in tree.body
            module = aliases.get(root, "").split(".")[0] in MODULES
            if root in referee and "." not in name and top and not keyed:
                found.append((node.lineno, f"rebinds {name}"))
            elif root in referee and ("." in name or keyed):
                found.append((node.lineno, f"changes {name}"))
            elif module and "." not in name and top and not keyed:
                found.append((node.lineno, f"rebinds {name} (it names {aliases[root]})"))
            elif module and (keyed or _module_referee(name, aliases)):
                found.append((node.lineno, f"changes {name}{'[...]' if keyed else ''}"))
    return sorted(set(found))


def _aliases(code: str) -> dict[str, str]:
    """The names a cell's imports bind to judged modules: ``np`` -> ``numpy``."""
    found = {}
    try:
        tree = ast.parse(cell_python(code))
    except SyntaxError:
        return found
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                bound = alias.asname or alias.name.split(".")[0]
                found[bound] = alias.name if alias.asname else bound
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            for alias in node.names:
                found[alias.asname or alias.name] = f"{node.module}.{alias.name}"
    return found


def flags(nb) -> list[str]:
    """Each rebinding of the referee by an answer cell of notebook ``nb`` (nbformat), as
    ``"<grade id> line <n>: <what>"``, in the notebook's order."""
    referee: set[str] = set()
    aliases: dict[str, str] = {}
    found = []
    for cell in nb.cells:
        if cell.get("cell_type") != "code":
            continue
        meta = cell.get("metadata", {}).get("nbgrader", {})
        aliases.update(_aliases(cell.source))
        if meta.get("solution"):
            for line, what in answer_flags(cell.source, referee, aliases):
                found.append(f"{meta.get('grade_id')} line {line}: {what}")
        elif meta.get("locked") or meta.get("grade"):
            referee |= _defined(cell.source)
    return found
