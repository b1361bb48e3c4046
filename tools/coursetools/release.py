"""The helper's releases: which gpucourse the lessons' set-up cells install, and when it must move.

    python -m coursetools.release check    # what the suite checks
    python -m coursetools.release record   # after bumping gpucourse.__version__ (`make release`)

On Colab a lesson's set-up cell installs gpucourse from the course repository at the tag
``v<version>`` (``HELPER = "v0.2.0"`` in the cell), so a learner's saved copy keeps the helper it
was written for, whatever ``main`` holds later. The CI workflow .github/workflows/release.yml
creates that tag on the commit that first carries the version.

Each version is recorded in the releases file beside the helper (``RELEASES``): a digest of the
helper's source and its public API (every public function and class of every module, with its
signature). The rules, checked by ``check``:
- the source differs from the recorded digest: bump the version (the tag would not hold it);
- a public name was removed or its signature changed since the previous release: bump the minor
  version at least (0.x: a minor is a breaking release), not only the patch;
- every set-up cell names ``v<the version>``.
``record`` writes the entry for the current version and points every set-up cell at it (then run
`make notebooks`). It refuses to rewrite a version already recorded with another source.
"""

from __future__ import annotations

import hashlib
import importlib
import inspect
import json
import pkgutil
import re
import sys

from coursetools.course import ROOT, lessons, solution_path

PACKAGE = ROOT / "utils" / "gpucourse"
RELEASES = ROOT / "utils" / "releases.json"
HELPER_LINE = re.compile(r'^HELPER = "v([^"]+)"', re.MULTILINE)


def version() -> str:
    """gpucourse.__version__, read from the source (the installed one may be older)."""
    text = (PACKAGE / "__init__.py").read_text()
    return re.search(r'^__version__ = "([^"]+)"', text, re.MULTILINE)[1]


def digest() -> str:
    """sha256 of the helper's Python source, file names included, in a fixed order."""
    h = hashlib.sha256()
    for path in sorted(PACKAGE.rglob("*.py")):
        h.update(path.relative_to(PACKAGE).as_posix().encode() + b"\0" + path.read_bytes())
    return h.hexdigest()


def _signature(obj) -> str:
    try:
        return str(inspect.signature(obj))
    except (TypeError, ValueError):
        return "(...)"


def api() -> dict[str, str]:
    """Every public function and class defined in a public gpucourse module -> its signature."""
    import gpucourse

    found = {}
    names = ["gpucourse"] + [
        m.name
        for m in pkgutil.walk_packages(gpucourse.__path__, "gpucourse.")
        if not any(part.startswith("_") for part in m.name.split("."))
    ]
    for name in names:
        module = importlib.import_module(name)
        for attr, obj in vars(module).items():
            if attr.startswith("_") or getattr(obj, "__module__", None) != name:
                continue
            if inspect.isfunction(obj) or inspect.isclass(obj):
                found[f"{name}.{attr}"] = _signature(obj)
    return dict(sorted(found.items()))


def _key(v: str) -> tuple[int, ...]:
    return tuple(int(part) for part in v.split("."))


def broken(old: dict[str, str], new: dict[str, str]) -> list[str]:
    """The public names ``old`` had that ``new`` removed or changed."""
    return [f"{n}{s} -> {new.get(n, 'removed')}" for n, s in old.items() if new.get(n) != s]


def setup_cell_versions() -> dict[str, str | None]:
    """Each lesson -> the helper version its set-up cell installs (None: the cell names none)."""
    import nbformat

    found = {}
    for lesson in lessons():
        cell = next(
            c for c in nbformat.read(solution_path(lesson), 4).cells if c.cell_type == "code"
        )
        match = HELPER_LINE.search(cell.source)
        found[lesson] = match[1] if match else None
    return found


def problems() -> list[str]:
    releases = json.loads(RELEASES.read_text()) if RELEASES.exists() else {}
    current, said = version(), []
    entry = releases.get(current)
    if entry is None:
        said.append(f"gpucourse {current} is not recorded: run `make release`")
    elif entry["digest"] != digest():
        said.append(
            f"the helper's source changed since {current} was recorded (its tag holds the old "
            "one): bump gpucourse.__version__ and run `make release`"
        )
    earlier = sorted((v for v in releases if _key(v) < _key(current)), key=_key)
    if entry and earlier and _key(current)[:2] == _key(earlier[-1])[:2]:
        gone = broken(releases[earlier[-1]]["api"], entry["api"])
        if gone:
            said.append(
                f"{current} changes public names of {earlier[-1]} in a patch release; bump the "
                f"minor version: {'; '.join(gone[:5])}"
            )
    stale = {lesson: v for lesson, v in setup_cell_versions().items() if v != current}
    if stale:
        said.append(f"set-up cells that do not install v{current}: {stale} (`make release`)")
    return said


def record_entry(current: str, source: str, public: dict[str, str]) -> str | None:
    """Write ``current``'s entry; a message instead when it is recorded with another source."""
    releases = json.loads(RELEASES.read_text()) if RELEASES.exists() else {}
    if current in releases and releases[current]["digest"] != source:
        return f"{current} is recorded with another source: bump gpucourse.__version__ first"
    releases[current] = {"digest": source, "api": public}
    ordered = dict(sorted(releases.items(), key=lambda item: _key(item[0])))
    RELEASES.write_text(json.dumps(ordered, indent=1) + "\n")
    return None


def record() -> int:
    current = version()
    refused = record_entry(current, digest(), api())
    if refused:
        print(refused)
        return 1
    import nbformat

    for lesson in lessons():
        path = solution_path(lesson)
        nb = nbformat.read(path, 4)
        cell = next(c for c in nb.cells if c.cell_type == "code")
        cell.source = HELPER_LINE.sub(f'HELPER = "v{current}"', cell.source)
        nbformat.write(nb, path)
    where = RELEASES.relative_to(ROOT)
    print(f"recorded gpucourse {current} in {where}; set-up cells install v{current}")
    return 0


def main(argv: list[str]) -> int:
    if argv == ["record"]:
        return record()
    if argv == ["check"]:
        said = problems()
        print("\n".join(said) or f"gpucourse {version()}: recorded, set-up cells agree")
        return 1 if said else 0
    print(__doc__.split("\n\n")[1])
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
