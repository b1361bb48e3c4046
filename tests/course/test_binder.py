"""binder/ builds a CPU-only environment in which every lesson can run (checked statically, no
repo2docker build).

tests/course/test_pins.py already checks that binder/ is generated from the course pins (every pin
but DALI, the Python version). Here: what repo2docker will make of binder/, and that each lesson's
imports are satisfied by what binder/requirements.txt installs (with everything those packages
depend on), the standard library and gpucourse; TensorFlow and DALI only through
``gpucourse.import_tensorflow()`` / ``gpucourse.import_dali()``, which degrade to a sentence when
the package is missing (a lesson may then import from them under ``if dali is not None:``).
"""

from __future__ import annotations

import ast
import importlib.metadata
import re
import subprocess
import sys
from functools import cache

import coursekit as ck
import pytest
from coursetools import pins
from packaging.requirements import Requirement

BINDER = ck.ROOT / "binder"
# Imported only through gpucourse, which returns None with one clear sentence when they are missing.
THROUGH_GPUCOURSE = {
    "tensorflow": "gpucourse.import_tensorflow()",
    "keras": "gpucourse.import_tensorflow()",
    "nvidia.dali": "gpucourse.import_dali()",
}
# RAPIDS needs a GPU even to import, so Binder cannot have it: a lesson imports these only inside a
# function that runs after its accelerator started (lesson 10's `start_accelerator`), never at a
# cell's top level.
GPU_ONLY = {"cudf", "cuml", "cupy"}
# repo2docker reads binder/ alone when it exists; any of these there would change how it builds.
CONFIG_FILES = {
    "environment.yml",
    "Pipfile",
    "Pipfile.lock",
    "setup.py",
    "Project.toml",
    "REQUIRE",
    "install.R",
    "apt.txt",
    "DESCRIPTION",
    "requirements.txt",
    "runtime.txt",
    "postBuild",
    "start",
    "default.nix",
    "Dockerfile",
}
EXPECTED = {"requirements.txt", "runtime.txt", "postBuild"}


def _normal(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def binder_requirements() -> list[str]:
    lines = (BINDER / "requirements.txt").read_text().splitlines()
    return [
        line.strip() for line in lines if line.strip() and not line.lstrip().startswith(("#", "-"))
    ]


@cache
def binder_closure() -> frozenset[str]:
    """The distributions pip installs from binder/requirements.txt, dependencies included (read
    from this venv)."""
    seen, todo = set(), [pins.package_name(r) for r in binder_requirements()]
    while todo:
        name = _normal(todo.pop())
        if name in seen:
            continue
        seen.add(name)
        try:
            requires = importlib.metadata.requires(name) or []
        except importlib.metadata.PackageNotFoundError:
            # not installed here: it still counts as provided, but its dependencies are unknown
            continue
        for text in requires:
            requirement = Requirement(text)
            if requirement.marker is None or requirement.marker.evaluate({"extra": ""}):
                todo.append(requirement.name)
    return frozenset(seen)


@cache
def providers() -> dict[str, set[str]]:
    """Top-level import name -> the distributions that provide it (in this venv)."""
    return {
        module: {_normal(d) for d in dists}
        for module, dists in importlib.metadata.packages_distributions().items()
    }


def code_of(cell_source: str) -> list[str]:
    """Python sources in a code cell: the cell (IPython syntax turned into Python) and any
    `%%writefile *.py` body."""
    from IPython.core.inputtransformer2 import TransformerManager

    first, _, body = cell_source.partition("\n")
    if first.startswith("%%writefile"):
        return [body] if first.split()[-1].endswith(".py") else []
    return [TransformerManager().transform_cell(cell_source)]


OPTIONAL_IMPORTERS = {"import_tensorflow", "import_dali"}
IMPORT_ERRORS = {"ImportError", "ModuleNotFoundError", "Exception", "BaseException"}


def _catches_import_errors(node: ast.Try) -> bool:
    for handler in node.handlers:
        kinds = handler.type.elts if isinstance(handler.type, ast.Tuple) else [handler.type]
        if handler.type is None or any(
            isinstance(k, ast.Name) and k.id in IMPORT_ERRORS for k in kinds
        ):
            return True
    return False


def written_modules(lesson: str) -> set[str]:
    """The modules a lesson writes as files of its own (`%%writefile {workdir}/by_hand.py`)."""
    heads = [
        c.source.splitlines()[0]
        for c in ck.read(ck.solution_path(lesson)).cells
        if c.cell_type == "code" and c.source.startswith("%%writefile")
    ]
    return {m.group(1) for head in heads if (m := re.search(r"(\w+)\.py\s*$", head))}


def imports_of(lesson: str) -> dict[str, tuple[str, bool]]:
    """Imported module (dotted, as written) -> (the first line importing it, whether that import is
    guarded).

    Guarded: under an `if` on a name bound to ``gpucourse.import_tensorflow()`` /
    ``gpucourse.import_dali()`` (``if dali is not None: from nvidia.dali import fn``), in a `try`
    that catches ImportError, or (RAPIDS, ``GPU_ONLY``) inside a function.
    """
    sources = [
        s
        for c in ck.read(ck.solution_path(lesson)).cells
        if c.cell_type == "code"
        for s in code_of(c.source)
    ]
    trees = [(source, ast.parse(source)) for source in sources]
    optional = {
        target.id
        for _, tree in trees
        for node in ast.walk(tree)
        if isinstance(node, ast.Assign)
        and isinstance(node.value, ast.Call)
        and isinstance(node.value.func, ast.Attribute)
        and node.value.func.attr in OPTIONAL_IMPORTERS
        for target in node.targets
        if isinstance(target, ast.Name)
    }
    found: dict[str, tuple[str, bool]] = {}

    def visit(node: ast.AST, guarded: bool, source: str, lazily: bool = False) -> None:
        if (
            isinstance(node, ast.If)
            and {n.id for n in ast.walk(node.test) if isinstance(n, ast.Name)} & optional
        ):
            guarded = True
        if isinstance(node, ast.Try) and _catches_import_errors(node):
            guarded = True
        in_function = isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
        names = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0:
            names = [node.module] + [f"{node.module}.{alias.name}" for alias in node.names]
        for name in names:
            line = ast.get_source_segment(source, node) or name
            lazy = lazily and name.split(".")[0] in GPU_ONLY
            if name not in found or found[name][1] and not (guarded or lazy):
                found[name] = (line, guarded or lazy)
        for child in ast.iter_child_nodes(node):
            visit(child, guarded, source, lazily or in_function)

    for source, tree in trees:
        visit(tree, False, source)
    return found


def test_binder_holds_only_the_pip_build():
    present = {p.name for p in BINDER.iterdir()}
    assert present & CONFIG_FILES == EXPECTED, (
        f"binder/ holds {sorted(present & CONFIG_FILES)}: repo2docker reads binder/ alone, and a "
        "conda environment.yml there would replace the pip requirements"
    )
    assert (ck.ROOT / "environment.yml").exists(), (
        "the GPU conda file stays at the top, where Binder ignores it"
    )


def test_binder_installs_cpu_builds_and_nothing_for_a_gpu():
    text = (BINDER / "requirements.txt").read_text()
    assert f"--extra-index-url {pins.CPU_TORCH_INDEX}" in text.splitlines(), "PyTorch's CPU wheels"
    for requirement in binder_requirements():
        name = pins.package_name(requirement)
        assert "[" not in requirement, (
            f"{requirement}: no extras on Binder (e.g. tensorflow[and-cuda])"
        )
        assert not (name.startswith("nvidia-") and name != "nvidia-ml-py"), (
            f"{requirement} is a CUDA package"
        )
        assert ";" not in requirement, "binder/ is one platform (Linux): no markers"


def test_binder_installs_the_helper_without_dependencies():
    post_build = (BINDER / "postBuild").read_text()
    installs = [line for line in post_build.splitlines() if re.search(r"\bpip install\b", line)]
    assert installs and all("--no-deps" in line for line in installs), (
        "postBuild adds gpucourse and the course's tools, nothing more"
    )
    # nbgrader_config.py loads coursetools: without it Validate is stock nbgrader (a line on stderr
    # fails a right answer; the demos run)
    assert any(re.search(r"--editable tools\b", line) for line in installs), (
        "postBuild installs the course's tools (tools/), which the Validate button's config needs"
    )
    mode = subprocess.run(
        ["git", "ls-files", "-s", "binder/postBuild"], cwd=ck.ROOT, capture_output=True, text=True
    )
    assert mode.stdout.startswith("100755") or not mode.stdout, "postBuild is executable"
    # --no-deps: so the helper's own requirements must all come from requirements.txt.
    import tomllib

    helper = tomllib.loads((ck.ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    listed = {_normal(pins.package_name(r)) for r in binder_requirements()}
    for requirement in helper:
        assert _normal(Requirement(requirement).name) in listed, (
            f"gpucourse needs {requirement}, binder/ lacks it"
        )


@pytest.mark.parametrize("lesson", ck.lessons())
def test_every_import_is_on_binder(lesson):
    missing = {}
    written = written_modules(lesson)  # scripts the lesson writes itself (%%writefile .../name.py)
    for module, (line, guarded) in imports_of(lesson).items():
        through = next(
            (v for k, v in THROUGH_GPUCOURSE.items() if module == k or module.startswith(k + ".")),
            None,
        )
        if through:
            assert guarded, (
                f"{lesson}: `{line}`: get the module with {through} (None, with a sentence, when "
                "it is missing) and import from it only under `if <that name> is not None:`"
            )
            continue
        top = module.split(".")[0]
        if top in GPU_ONLY:
            assert guarded, f"{lesson}: `{line}`: import RAPIDS only inside a function"
            continue
        if top in sys.stdlib_module_names or top == "gpucourse" or top in missing or top in written:
            continue
        dists = providers().get(top)
        if not dists:
            missing[top] = f"`{line}`: no distribution provides {top!r}"
        elif not dists & binder_closure():
            missing[top] = (
                f"`{line}`: {top!r} comes from {sorted(dists)}, which binder/requirements.txt does "
                "not bring"
            )
    assert not missing, f"{lesson} imports what Binder lacks:\n" + "\n".join(missing.values())


def test_the_check_knows_the_course_packages():
    """The closure is real: the frameworks, Jupyter and IPython (through ipykernel) are in it,
    DALI is not."""
    closure = binder_closure()
    assert {
        "torch",
        "torchvision",
        "tensorflow",
        "numpy",
        "ipykernel",
        "ipython",
        "matplotlib",
        "pillow",
    } <= closure
    assert not any(name.startswith("nvidia-dali") for name in closure)
