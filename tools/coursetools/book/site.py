"""The reading edition's site: the pages staged with the home page, the claims catalogue and the
GPU reports, then built by Sphinx."""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import time
from pathlib import Path

import nbformat

from coursetools.book.pages import (
    BOOK_DOCS,
    EXECUTED,
    OUT,
    BookError,
    leaks,
    lesson_page,
    lesson_title,
)
from coursetools.course import ROOT, lessons, solution_path, student_path
from coursetools.executed import RUN_KEY, source_digest


def find_executed(lesson: str, dirs: list[Path]) -> Path | None:
    for folder in dirs:
        path = folder / f"{lesson}.ipynb"
        if path.exists():
            return path
    return None


def claims_page(root: Path, titles: dict[str, str]) -> str:
    """Every claim the lessons make (their `claims.claim(` calls), by lesson."""
    lines = [
        "# The claims catalogue",
        "",
        "Each statement a lesson makes about what a GPU does is a *claim*: on a GPU the lesson "
        "measures it and checks it against a sourced bound (`gpucourse.claims.claim`); on a CPU "
        "the same cell prints what it would check. The GPU runner (`make test-gpu`) reports each "
        "one with its measured value. These are the claims, lesson by lesson.",
        "",
    ]
    try:
        from coursetools.gpurun.catalogue import lesson_claims
    except ImportError as error:  # the runner's catalogue moved: say so on the page
        return "\n".join([*lines, f"(The catalogue could not be read: {error}.)", ""])
    for lesson, title in titles.items():
        found = lesson_claims(solution_path(lesson, root))
        lines += [f"## [{lesson[:2]} {title}](lessons/{lesson}.ipynb)", ""]
        if not found:
            lines += ["This lesson makes no GPU claim.", ""]
            continue
        lines += ["| claim | part |", "|---|---|"]
        for claim in found:
            text = claim["text"].replace("|", "\\|").replace("\n", " ")
            lines.append(f"| {text} | {claim.get('part') or ''} |")
        lines.append("")
    return "\n".join(lines)


def repository_url(root: Path = ROOT) -> str:
    import tomllib

    project = tomllib.loads((root / "pyproject.toml").read_text())["project"]
    return project.get("urls", {}).get("Repository", "https://github.com/gpus-for-ml/gpus-for-ml")


def home_page(titles: dict[str, str], runs: dict[str, dict], extra: list[str]) -> str:
    template = (BOOK_DOCS / "index.md").read_text()
    rows = []
    for lesson, title in titles.items():
        run = runs.get(lesson) or {}
        where = f" (outputs from {run['device']})" if run.get("device") else ""
        rows.append(f"- [{title}](lessons/{lesson}.ipynb){where}")
    toc = ["```{toctree}", ":hidden:", ":caption: Lessons", ""]
    toc += [f"lessons/{lesson}" for lesson in titles]
    toc += ["```", ""]
    if extra:
        toc += ["```{toctree}", ":hidden:", ":caption: Reference", "", *extra, "```", ""]
    return (
        template.replace("{{repository}}", f"[the course's repository]({repository_url()})")
        .replace("{{lessons}}", "\n".join(rows))
        .replace("{{toctree}}", "\n".join(toc))
    )


def stage(root: Path, src: Path, chosen: list[str], dirs: list[Path], strict: bool) -> dict:
    """Write the site's sources into src: conf.py, the home page, the lesson pages, the claims
    catalogue and the GPU reports. Returns {lesson: its run stamp}."""
    if src.exists():
        shutil.rmtree(src)
    (src / "lessons").mkdir(parents=True)
    shutil.copy(BOOK_DOCS / "conf.py", src / "conf.py")
    shutil.copytree(BOOK_DOCS / "_static", src / "_static")
    titles, runs, missing, stale = {}, {}, [], []
    for lesson in chosen:
        path = find_executed(lesson, dirs)
        if path is None:
            missing.append(lesson)
            continue
        executed = nbformat.read(path, as_version=4)
        source = nbformat.read(solution_path(lesson, root), as_version=4)
        run = executed.metadata.get(RUN_KEY) or {}
        if run.get("source_digest") and run["source_digest"] != source_digest(source):
            stale.append(f"{lesson} ({path})")
        student = student_path(lesson, root)
        student_nb = nbformat.read(student, as_version=4) if student.exists() else None
        page = lesson_page(executed, student_nb)
        nbformat.write(page, src / "lessons" / f"{lesson}.ipynb")
        titles[lesson] = lesson_title(page, lesson)
        runs[lesson] = run
    folders = ", ".join(str(d) for d in dirs)
    if missing:
        raise BookError(
            f"no executed notebook for {', '.join(missing)} in {folders}: `make test` keeps them "
            "(or run one lesson: .venv/bin/python -m pytest --nbval-lax -p coursetools.executed "
            "--save-executed test-artifacts/executed solutions/NN_topic/topic.ipynb)"
        )
    if stale:
        message = (
            f"executed before its solution last changed: {', '.join(stale)}; run `make test` "
            "again for current outputs"
        )
        if strict:
            raise BookError(message)
        print(f"book: warning: {message}", file=sys.stderr)
    extra = ["claims"]
    (src / "claims.md").write_text(claims_page(root, titles))
    reports = sorted((root / "docs" / "gpu-reports").glob("*.md"))
    if reports:
        (src / "gpu-reports").mkdir()
        for report in reports:
            name = "index" if report.name == "README.md" else report.stem
            shutil.copy(report, src / "gpu-reports" / f"{name}.md")
        extra.append("gpu-reports/index" if (src / "gpu-reports/index.md").exists() else "")
        extra += [f"gpu-reports/{r.stem}" for r in reports if r.name != "README.md"]
        extra = [e for e in extra if e]
    (src / "index.md").write_text(home_page(titles, runs, extra))
    return runs


def build(
    root: Path = ROOT,
    out: Path = OUT,
    chosen: list[str] | None = None,
    dirs: list[Path] | None = None,
    strict: bool = False,
) -> Path:
    """Build the site into out/html; returns that folder."""
    chosen = chosen or lessons(root)
    dirs = dirs or EXECUTED
    src, html = out / "src", out / "html"
    stage(root, src, chosen, dirs, strict)
    if html.exists():
        shutil.rmtree(html)
    command = [sys.executable, "-m", "sphinx", "-b", "html", "-q", "-j", "auto"]
    command += ["-d", str(out / "doctrees"), str(src), str(html)]
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode != 0:
        raise BookError(f"Sphinx failed ({' '.join(command)}):\n{done.stderr[-4000:]}")
    found = {
        str(page.relative_to(html)): leaks(page.read_text(errors="replace"))
        for page in html.rglob("*.html")
    }
    found = {page: lines for page, lines in found.items() if lines}
    if found:
        raise BookError(f"nbgrader markers on the site: {found}")
    (html / ".nojekyll").touch()  # GitHub Pages: serve _static/ as it is
    return html


def missing_packages() -> list[str]:
    import importlib.util

    wanted = {"sphinx": "sphinx", "myst_nb": "myst-nb", "sphinx_book_theme": "sphinx-book-theme"}
    wanted["sphinx_design"] = "sphinx-design"
    return [name for module, name in wanted.items() if importlib.util.find_spec(module) is None]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m coursetools.book", description=__doc__.split("\n")[0]
    )
    parser.add_argument("lessons", nargs="*", help="lesson folders to include (default: all)")
    parser.add_argument("--out", type=Path, default=OUT, help=f"default: {OUT.relative_to(ROOT)}")
    parser.add_argument(
        "--executed",
        type=Path,
        action="append",
        help="a folder of executed notebooks, NN_topic.ipynb (repeatable, first wins; default: "
        + ", ".join(str(d.relative_to(ROOT)) for d in EXECUTED)
        + ")",
    )
    parser.add_argument(
        "--strict", action="store_true", help="fail when a lesson changed after its run"
    )
    args = parser.parse_args(argv)
    unknown = sorted(set(args.lessons) - set(lessons()))
    if unknown:
        parser.error(f"no such lesson: {', '.join(unknown)} (lessons: {', '.join(lessons())})")
    if missing := missing_packages():
        print(
            f"book: {', '.join(missing)} not installed here: the site is built with Sphinx, "
            "MyST-NB, the Sphinx Book Theme and sphinx-design (the course extra in pyproject.toml; "
            "`make` installs it)",
            file=sys.stderr,
        )
        return 1
    start = time.monotonic()
    try:
        html = build(ROOT, args.out, args.lessons or None, args.executed, args.strict)
    except BookError as error:
        print(f"book: {error}", file=sys.stderr)
        return 1
    print(
        f"book: the site is in {html} ({time.monotonic() - start:.0f} s): "
        f"open {html / 'index.html'}"
    )
    return 0
