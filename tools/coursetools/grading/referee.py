"""What a learner's answer cells may not touch: the referee a test judges with.

Answer cells and test cells share one kernel, so an answer cell could rebind what a later test
judges with: a function or class a read-only cell defined (lesson 09's ``Watch``, ``BatchLog``), a
function of a module the tests read (``torch.cuda.synchronize``, ``time.perf_counter``,
``warnings.warn``, ``sys.modules``). Autograde restores the read-only cells, not the kernel's state
after an answer, so ``flags(nb)`` reads every answer cell (statically: what it would do at run time
needs no run) and names each such rebinding, with its cell and line; the class table and report show
them. A setting is no rebinding: ``torch.backends.cudnn.benchmark = True`` sets a flag the lesson
teaches, and only a module attribute that holds a function, a class or a module (or that does not
exist) is a referee.

It follows a referee under another name. A name bound from one (``W = Watch``,
``T = torch.Tensor``, ``W, T = Watch, torch.Tensor``, ``from __main__ import Watch as W``,
``g = globals()``) stands for it in every later line of the notebook, wherever it was bound. It
follows the notebook's namespace reached as ``globals()``, ``vars()``, ``sys.modules["__main__"]``
or ``__import__("__main__")``; ``setattr``, ``mock.patch`` and ``monkeypatch`` calls; and a
``global Watch`` statement in a function. A store into a namespace it cannot name
(``sys.modules[name].Watch``, ``globals()[name]``) is flagged as well. What a static read cannot
see: a patch made at run time (``exec``, ``eval``, a ``getattr`` with a computed name, a referee
passed into a function or a container and patched there, code in another module), or a referee's
object changed by its own methods (``log.seen.clear()`` is a call, not a store). The flag column is
a lead for the instructor, never a score.
"""

from __future__ import annotations

import ast
import importlib
import inspect
from dataclasses import dataclass, field

from coursetools.text import cell_python

# The modules a test judges with; their callables are the referee's.
MODULES = ("torch", "time", "warnings", "sys", "builtins", "gc", "os", "gpucourse", "numpy")
# unittest.mock.patch(.object, .dict), monkeypatch.setattr/.setitem, setattr, object.__setattr__
PATCHERS = {"patch", "object", "setattr", "delattr", "__setattr__", "__delattr__"}
KEYED_PATCHERS = {"setitem", "delitem", "dict"}
MUTATORS = {"update", "setdefault", "pop", "popitem", "clear", "__setitem__", "__delitem__"}
MAIN = "__main__"  # the root of a path in the notebook's own namespace: (MAIN, "Watch", "_read")
SOME = "?"  # the root of a path in a namespace no static read can name: sys.modules[name]
SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)
LOCAL = (ast.ClassDef, ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)
DEFINITIONS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)

Path = tuple[str, ...]


@dataclass
class Names:
    """What a notebook's names stand for, cell after cell."""

    referee: set[str] = field(default_factory=set)  # read-only cells' functions and classes
    imports: dict[str, str] = field(default_factory=dict)  # what imports bound: np -> numpy
    bound: dict[str, Path] = field(default_factory=dict)  # aliases: W -> (MAIN, "Watch")


def _parse(code: str) -> ast.Module | None:
    try:
        return ast.parse(cell_python(code))
    except SyntaxError:
        return None


def _defined(code: str) -> set[str]:
    """The functions and classes a cell defines at its top level."""
    tree = _parse(code)
    return {n.name for n in tree.body if isinstance(n, DEFINITIONS)} if tree else set()


def _imports_of(nodes) -> dict[str, str]:
    """The names imports among ``nodes`` bind: ``np`` -> ``numpy``, ``W`` -> ``__main__.Watch``."""
    found = {}
    for node in nodes:
        if isinstance(node, ast.Import):
            for alias in node.names:
                bound = alias.asname or alias.name.split(".")[0]
                found[bound] = alias.name if alias.asname else bound
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            for alias in node.names:
                found[alias.asname or alias.name] = f"{node.module}.{alias.name}"
    return found


def _shown(node: ast.AST) -> str:
    """How an answer wrote a target: ``W._read``, ``globals()[...]``."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return f"{_shown(node.value)}.{node.attr}"
    if isinstance(node, ast.Subscript):
        return f"{_shown(node.value)}[...]"
    if isinstance(node, ast.Call):
        return f"{_shown(node.func)}({'...' if node.args or node.keywords else ''})"
    return "..."


def _text(node: ast.AST | None) -> str | None:
    """A string constant's value, else None."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    return None


def _module_path(name: str | None) -> Path:
    """Where ``sys.modules[name]`` or ``__import__(name)`` leads."""
    if name is None:
        return (SOME,)
    return (MAIN,) if name == MAIN else tuple(name.split("."))


def _name(name: str, names: Names) -> Path:
    """What a name of the notebook's namespace stands for."""
    if name in names.bound:
        return names.bound[name]
    if name in names.imports:
        return _module_path(names.imports[name])
    if name == "__builtins__":
        return ("builtins",)
    return (MAIN,) if name == MAIN else (MAIN, name)


def _in(base: Path | None, name: str | None, names: Names) -> Path | None:
    """``name`` in what ``base`` names: an attribute, or in the notebook's namespace the name's
    own meaning (``sys.modules["__main__"].W`` is ``W``, whatever ``W`` stands for)."""
    if base is None:
        return None
    if name is None or not name.isidentifier():
        return (SOME,)
    return _name(name, names) if base == (MAIN,) else (*base, name)


def _path(node: ast.AST, names: Names) -> Path | None:
    """What an expression names: (MAIN, "Watch", "_read") for ``W._read`` after ``W = Watch``,
    ("torch", "Tensor", "item") for ``T.item`` after ``T = torch.Tensor``, (MAIN,) for
    ``globals()``, (SOME,) for ``sys.modules[name]``; None for what no path names (a call's
    result)."""
    if isinstance(node, ast.Name):
        return _name(node.id, names)
    if isinstance(node, ast.Attribute):
        return _in(_path(node.value, names), node.attr, names)
    if isinstance(node, ast.Subscript):
        base, key = _path(node.value, names), _text(node.slice)
        if base is None:
            return None
        if base == ("sys", "modules"):
            return _module_path(key)
        if base == (MAIN,) or base[-1] == "__dict__":  # a namespace's own items
            return _in(base if base == (MAIN,) else base[:-1], key, names)
        return (SOME,) if base[0] == SOME else (*base, "[]")
    if isinstance(node, ast.Call):
        func = _path(node.func, names)
        what = func[-1] if func and func[:-1] in ((MAIN,), ("builtins",), ("importlib",)) else None
        if what in ("globals", "vars", "locals") and not node.args:
            return (MAIN,)
        if what == "vars" and len(node.args) == 1:
            base = _path(node.args[0], names)
            return None if base is None else (*base, "__dict__")
        if what in ("__import__", "import_module") and node.args:
            return _module_path(_text(node.args[0]))
        if what == "getattr" and len(node.args) >= 2:
            attr = _text(node.args[1])
            return None if attr is None else _in(_path(node.args[0], names), attr, names)
    return None


def _target(target: ast.AST, names: Names) -> tuple[Path | None, bool]:
    """What a store into ``target`` replaces, and whether by an item (``keyed``): the name itself
    where it is one of the namespace (``W = 3`` and ``globals()["W"] = 3`` rebind ``W``, not what
    it stood for)."""
    if isinstance(target, ast.Name):
        return (MAIN, target.id), False
    if isinstance(target, ast.Attribute):
        base = _path(target.value, names)
        return (None if base is None else (*base, target.attr)), False
    if isinstance(target, ast.Subscript):
        container, key = _path(target.value, names), _text(target.slice)
        namespace = container == (MAIN,) or (container and container[-1] == "__dict__")
        if namespace and key is not None and key.isidentifier():
            return ((*container, key) if container == (MAIN,) else (*container[:-1], key)), False
        return container, True
    return None, False


def _module_referee(path: Path) -> bool:
    """Whether ``path`` (("time", "perf_counter"), ("torch", "backends", "cudnn", "benchmark"))
    names a function, class or module of a judged module, or an attribute it does not have."""
    if path[0] not in MODULES or len(path) < 2:
        return path[0] in MODULES
    for end in range(len(path), 0, -1):
        try:
            value = importlib.import_module(".".join(path[:end]))
        except (ImportError, ValueError):
            continue
        try:
            for name in path[end:]:
                value = getattr(value, name)
        except AttributeError:
            return True
        return callable(value) or inspect.ismodule(value)
    return True


def _stands_for_referee(path: Path | None, names: Names) -> bool:
    """Whether a name bound to ``path`` is an alias a store through would patch the referee by."""
    if path is None:
        return False
    if path[0] == SOME or path in ((MAIN,), ("sys", "modules")):
        return True
    if path[0] == MAIN:
        return path[1] in names.referee
    return _module_referee(path)


def _pairs(target: ast.AST, value: ast.AST):
    """(target, value) for each name an assignment binds, tuples unpacked: ``W, T = Watch, x``."""
    if isinstance(target, (ast.Tuple, ast.List)) and isinstance(value, (ast.Tuple, ast.List)):
        starred = any(isinstance(e, ast.Starred) for e in (*target.elts, *value.elts))
        if not starred and len(target.elts) == len(value.elts):
            for t, v in zip(target.elts, value.elts, strict=True):
                yield from _pairs(t, v)
        return
    yield target, value


def _own(node: ast.AST):
    """The nodes of one scope, a cell's or a function's: not those inside the functions it
    defines (their defaults and parameters belong to them)."""
    for child in ast.iter_child_nodes(node):
        yield child
        if not isinstance(child, SCOPES):
            yield from _own(child)


def _assignments(nodes) -> list[tuple[ast.AST, ast.AST]]:
    """(target, value) for each name bound among ``nodes``: by an assignment, a loop over a
    written sequence (``for W in (Watch,)``) or a default argument (``def f(W=Watch)``)."""
    pairs = []
    for node in nodes:
        if isinstance(node, ast.Assign):
            pairs += [p for target in node.targets for p in _pairs(target, node.value)]
        elif isinstance(node, (ast.AnnAssign, ast.NamedExpr)) and node.value is not None:
            pairs += list(_pairs(node.target, node.value))
        elif isinstance(node, (ast.For, ast.AsyncFor, ast.comprehension)):
            if isinstance(node.iter, (ast.Tuple, ast.List, ast.Set)):
                pairs += [(node.target, value) for value in node.iter.elts]
        elif isinstance(node, ast.arguments):
            positional = [*node.posonlyargs, *node.args]
            given = zip(
                positional[len(positional) - len(node.defaults) :], node.defaults, strict=True
            )
            keywords = zip(node.kwonlyargs, node.kw_defaults, strict=True)
            pairs += [(ast.Name(a.arg), v) for a, v in (*given, *keywords) if v is not None]
    return pairs


def _bind(pairs, names: Names, notebook: Names, declared: set[str] | None) -> None:
    """Record each name of ``pairs`` bound to a referee as its alias in ``names`` (until no more
    are found: ``A = Watch; B = A``); one the notebook's namespace gets (a cell's top level, a
    name declared ``global``, ``globals()["W"] = Watch``) also in ``notebook``, for the rest of the
    notebook."""
    for _ in range(len(pairs) + 1):
        changed = False
        for target, value in pairs:
            if isinstance(target, ast.Name):
                name, shared = target.id, declared is None or target.id in declared
            else:  # globals()["W"] = Watch
                path, keyed = _target(target, names)
                if keyed or not (path and len(path) == 2 and path[0] == MAIN):
                    continue
                name, shared = path[1], True
            path = _path(value, names)
            if _stands_for_referee(path, names) and names.bound.get(name) != path:
                names.bound[name], changed = path, True
                if shared:
                    notebook.bound[name] = path
        if not changed:
            return


def _declared(fn: ast.AST) -> set[str]:
    """The names a function declares ``global``."""
    return {n for node in _own(fn) if isinstance(node, ast.Global) for n in node.names}


def _inside(fn: ast.AST, outer: Names, notebook: Names) -> Names:
    """What names stand for inside function ``fn``: its parameters and the names it assigns hide
    the aliases outside it of the same name; its own aliases are its own."""
    args = fn.args
    params = [*args.posonlyargs, *args.args, *args.kwonlyargs, args.vararg, args.kwarg]
    stored = {
        n.id
        for n in _own(fn)
        if isinstance(n, ast.Name) and isinstance(n.ctx, (ast.Store, ast.Del))
    }
    defined = {n.name for n in _own(fn) if isinstance(n, DEFINITIONS)}
    declared = _declared(fn)
    local = (
        {a.arg for a in params if a} | stored | defined | set(_imports_of(_own(fn)))
    ) - declared
    inner = Names(
        outer.referee,
        {k: v for k, v in outer.imports.items() if k not in local} | _imports_of(_own(fn)),
        {k: v for k, v in outer.bound.items() if k not in local},
    )
    _bind(_assignments(_own(fn)), inner, notebook, declared)
    return inner


def _walk(node: ast.AST, scope: set[str] | None, names: Names, notebook: Names):
    """Each node with the names its scope binds in the notebook's namespace (None at a cell's top
    level: every name; in a function the names it declares ``global``; in a class or a
    comprehension none) and what names stand for there."""
    yield node, scope, names
    if isinstance(node, SCOPES):
        scope, names = _declared(node), _inside(node, names, notebook)
    elif isinstance(node, LOCAL):
        scope = set()
    for child in ast.iter_child_nodes(node):
        yield from _walk(child, scope, names, notebook)


@dataclass
class _Store:
    """One store an answer makes: into what it names (``path``), by an item (``keyed``), or
    into a plain name (``bare``)."""

    shown: str
    path: Path | None
    keyed: bool = False
    bare: bool = False
    named: Path | None = None  # what the shown text reaches, where it is not what it says


def _store(target: ast.AST, names: Names) -> _Store:
    """What storing into (or deleting) ``target`` changes."""
    path, keyed = _target(target, names)
    bare = isinstance(target, ast.Name)
    return _Store(_shown(target), path, keyed=keyed, bare=bare, named=path if keyed else None)


def _patched(call: ast.Call, names: Names) -> _Store | None:
    """What a patching call changes: ``setattr(W, "_read", f)``, ``mock.patch("time.time")``."""
    what = _shown(call.func).split(".")[-1]
    if what not in PATCHERS | KEYED_PATCHERS or not call.args:
        return None
    if what == "dict" and not isinstance(call.func, ast.Attribute):  # dict(globals()) copies
        return None
    first, keyed = call.args[0], what in KEYED_PATCHERS
    if (where := _text(first)) is not None:  # mock.patch("time.time"): a module's path
        path = _module_path(where.split(".")[0]) + tuple(where.split(".")[1:])
        if path[0] != MAIN and path[0] not in MODULES:
            return None
        return _Store(where + ("[...]" if keyed else ""), path, keyed=keyed, named=path)
    field_ = _text(call.args[1]) if len(call.args) > 1 else None
    if keyed:
        target = ast.Subscript(value=first, slice=ast.Constant(field_) if field_ else ast.Name("?"))
    else:
        target = ast.Attribute(value=first, attr=field_ or "?")
    return _store(target, names)


def _mutated(call: ast.Call, names: Names) -> _Store | None:
    """A namespace changed by its methods: ``globals().update(Watch=f)``, ``sys.modules.pop(k)``."""
    func = call.func
    if not (isinstance(func, ast.Attribute) and func.attr in MUTATORS):
        return None
    container = _path(func.value, names)
    if container is None or not (
        container in ((MAIN,), ("sys", "modules"))
        or container[0] == SOME
        or container[-1] == "__dict__"
    ):
        return None
    keys = [kw.arg for kw in call.keywords]
    if func.attr == "update":
        for arg in call.args:
            if isinstance(arg, ast.Dict):
                keys += [_text(k) for k in arg.keys]
            else:
                keys.append(None)
    elif func.attr in ("popitem", "clear") or not call.args:
        keys.append(None)
    else:
        keys.append(_text(call.args[0]))
    shown = _shown(call)
    if container == (MAIN,) or container[-1] == "__dict__":
        owner = container if container == (MAIN,) else container[:-1]
        if None in keys:
            return _Store(shown, owner, keyed=True)
        for key in keys:
            if _verdict(_Store(shown, (*owner, key)), names, True):
                return _Store(shown, (*owner, key), named=(*owner, key))
        return None
    return _Store(shown, container, keyed=True)


def _verdict(store: _Store, names: Names, binds_global: bool) -> str | None:
    """Where a store patches the referee, "rebinds" (a name) or "changes" (what it holds)."""
    path = store.path
    if path is None or not path:
        return None
    if path[0] == SOME:
        return "changes"
    if path[0] == MAIN:
        if len(path) == 1:  # globals()[name] = ...: which name, no static read can say
            return "changes"
        name = path[1]
        judged = names.imports.get(name, "").split(".")[0] in MODULES
        if len(path) == 2 and not store.keyed:
            if name in names.referee or judged:
                return "rebinds" if binds_global or not store.bare else None
            return None
        return "changes" if name in names.referee else None
    if path[0] not in MODULES:
        return None
    return "changes" if path == ("sys", "modules") or _module_referee(path) else None


def _named(path: Path | None, names: Names) -> str | None:
    """A path as the referee's own name: ``Watch._read``, ``torch.Tensor.item``."""
    if not path or path[0] == SOME or path == (MAIN,):
        return None
    parts = path[1:] if path[0] == MAIN else path
    if path[0] == MAIN and len(path) == 2 and path[1] in names.imports:
        return names.imports[path[1]]
    return ".".join("[...]" if p == "[]" else p for p in parts).replace(".[...]", "[...]")


def _said(store: _Store, verb: str, names: Names) -> str:
    """``changes W._read (it names Watch._read)``: what the answer wrote, and what it reaches."""
    named = _named(store.named or store.path, names)
    written = store.shown.removesuffix("[...]") if store.keyed else store.shown
    import_rebound = store.bare and store.path and store.path[1] not in names.referee
    if named and (named != written or import_rebound):
        return f"{verb} {store.shown} (it names {named})"
    return f"{verb} {store.shown}"


def answer_flags(code: str, names: Names) -> list[tuple[int, str]]:
    """(line, what) for each rebinding of the referee in one answer cell's code."""
    tree = _parse(code)
    if tree is None:
        return []
    found = []
    for node, scope, seen in _walk(tree, None, names, names):
        if isinstance(node, DEFINITIONS) and node.name in names.referee:
            if scope is None or node.name in scope:
                found.append((node.lineno, f"defines {node.name} again"))
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            for alias in node.names:
                bound = alias.asname or alias.name.split(".")[0]
                if bound in names.referee and (scope is None or bound in scope):
                    found.append((node.lineno, f"imports over {bound}"))
        elif isinstance(node, ast.Global):
            for name in node.names:
                judged = names.imports.get(name, "").split(".")[0] in MODULES
                if name in names.referee or judged:
                    found.append((node.lineno, f"declares {name} global"))
        stores = []
        if isinstance(node, (ast.Name, ast.Attribute, ast.Subscript)):
            if isinstance(node.ctx, (ast.Store, ast.Del)):
                stores.append(_store(node, seen))
        elif isinstance(node, ast.Call):
            stores += [s for s in (_patched(node, seen), _mutated(node, seen)) if s]
        for store in stores:
            bare_global = scope is None or (store.bare and store.path[1] in scope)
            if verb := _verdict(store, seen, bare_global):
                found.append((node.lineno, _said(store, verb, seen)))
    return sorted(set(found))


def flags(nb) -> list[str]:
    """Each rebinding of the referee by an answer cell of notebook ``nb`` (nbformat), as
    ``"<grade id> line <n>: <what>"``, in the notebook's order."""
    names = Names()
    found = []
    for cell in nb.cells:
        if cell.get("cell_type") != "code":
            continue
        meta = cell.get("metadata", {}).get("nbgrader", {})
        tree = _parse(cell.source)
        if tree is None:
            continue
        if not meta.get("solution") and (meta.get("locked") or meta.get("grade")):
            names.referee |= _defined(cell.source)
        names.imports.update(_imports_of(_own(tree)))
        _bind(_assignments(_own(tree)), names, names, None)
        if meta.get("solution"):
            for line, what in answer_flags(cell.source, names):
                found.append(f"{meta.get('grade_id')} line {line}: {what}")
    return found
