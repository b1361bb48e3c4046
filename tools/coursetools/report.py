"""A class report from the gradebook: what the class got right, what it got wrong, and with which error.

    python tools/report.py NN_topic [--course DIR] [--out DIR]        (or: make report LESSON=NN_topic)

after grading (`make grade LESSON=NN_topic`, or `nbgrader autograde`), writes reports/NN_topic.html, one page that
needs nothing else (its plot is embedded), and reports/NN_topic.csv, one row per submission:

- the score distribution (a histogram) and the class's mean and median;
- each test cell: points, how many submissions passed it, and its most common failure messages (an error's first
  line, as the autograded notebooks show it, with how many submissions met it and who);
- the cells that timed out, killed the kernel or were not run (tools/grade.py's `incidents`);
- the written answers still waiting for a person (nbgrader's `needs_manual_grade`);
- grading time per submission, as `make grade` measured it (reports/grading-times.json; absent after a plain
  `nbgrader autograde`), and beside it the speed-up a submission measured where the lesson prints one (lesson 09;
  shown, never graded).

Scores come from the gradebook through nbgrader's own API (nbgrader.api.Gradebook), so they are the scores the
Formgrader and `nbgrader export` show, hand-graded answers included.
"""

from __future__ import annotations

import argparse
import base64
import csv
import html
import io
import re
import statistics
import sys
from collections import Counter
from pathlib import Path

from coursetools import grade  # incidents, the grading-times file

ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
SHOWN_MESSAGES = 5  # the most common failure messages listed per test cell
SHOWN_NAMES = 3  # students named beside a message


def first_line(output) -> str:
    """An error output's first line: `ename: evalue`, without colours."""
    evalue = ANSI.sub("", str(output.get("evalue", ""))).strip()
    return f"{output.get('ename', 'Error')}: {evalue.splitlines()[0]}" if evalue else str(output.get("ename", "Error"))


def _failures(notebook: Path) -> dict[str, str]:
    """grade_id -> the first line of the first error a cell of an autograded notebook shows."""
    import nbformat

    found = {}
    for index, cell in enumerate(nbformat.read(notebook, as_version=4).cells):
        errors = [o for o in cell.get("outputs", []) if o.get("output_type") == "error"]
        if errors:
            found[grade.cell_name(cell, index)] = first_line(errors[0])
    return found


def collect(course: Path, lesson: str) -> dict:
    """The report's numbers: one dict per submission ("students"), per test cell ("tests"), the written answers
    waiting for a person ("ungraded") and the assignment's maximum ("max_score")."""
    from nbgrader.api import Gradebook

    times = grade.grading_times(course).get(lesson, {})
    students, tests, ungraded, order = [], {}, [], []
    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gb:
        assignment = gb.find_assignment(lesson)
        notebooks = {nb.name: nb for nb in assignment.notebooks}
        written = {(name, cell.name) for name, nb in notebooks.items() for cell in nb.solution_cells}
        for name, nb in notebooks.items():
            for cell in nb.grade_cells:
                if (name, cell.name) not in written:  # a grade cell that is not an answer: a test cell
                    label = cell.name if len(notebooks) == 1 else f"{name}/{cell.name}"
                    tests[(name, cell.name)] = {"cell": label, "points": cell.max_score, "passed": 0,
                                                "submissions": 0, "failures": Counter(), "who": {}}
        for submission in sorted(gb.assignment_submissions(lesson), key=lambda s: s.student_id):
            row = {"student": submission.student_id, "score": submission.score, "max_score": submission.max_score,
                   "seconds": times.get(submission.student_id), "cells": {}, "failed": [], "ungraded": [], "speedup": None,
                   grade.TIMEOUT: [], grade.DIED: [], grade.NOT_RUN: []}
            for notebook in submission.notebooks:
                graded = course / "autograded" / submission.student_id / lesson / f"{notebook.name}.ipynb"
                messages = _failures(graded) if graded.exists() else {}
                if graded.exists():
                    row["speedup"] = grade.speedup(graded)
                    cells = [c.metadata.get("nbgrader", {}).get("grade_id") for c in _read(graded).cells]
                    order += [(notebook.name, c) for c in cells if c and (notebook.name, c) not in order]
                    for kind, where in grade.incidents(graded).items():
                        row[kind] += where
                for g in notebook.grades:
                    key = (notebook.name, g.name)
                    if g.needs_manual_grade:
                        row["ungraded"].append(g.name)
                        ungraded.append((submission.student_id, g.name, g.max_score))
                    if key not in tests:
                        continue
                    test = tests[key]
                    row["cells"][test["cell"]] = g.score
                    test["submissions"] += 1
                    if g.score >= g.max_score:
                        test["passed"] += 1
                    else:
                        row["failed"].append(test["cell"])
                        message = messages.get(g.name, "(no error shown: the cell ran but scored below its points)")
                        test["failures"][message] += 1
                        test["who"].setdefault(message, []).append(submission.student_id)
            students.append(row)
    rank = {key: i for i, key in enumerate(order)}
    ordered = [tests[key] for key in sorted(tests, key=lambda k: (rank.get(k, len(rank)), k))]
    return {"lesson": lesson, "students": students, "tests": ordered, "ungraded": ungraded,
            "max_score": max((s["max_score"] for s in students), default=0.0)}


def _read(path: Path):
    import nbformat

    return nbformat.read(path, as_version=4)


def histogram(data: dict) -> bytes:
    """The score distribution as a PNG."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    scores, top = [s["score"] for s in data["students"]], data["max_score"] or 1
    fig, ax = plt.subplots(figsize=(7, 3.2), dpi=100)
    whole = float(top).is_integer() and top <= 40
    bins = [b - 0.5 for b in range(int(top) + 2)] if whole else 20
    ax.hist(scores, bins=bins, range=None if whole else (0, top), color="#4c72b0", edgecolor="white")
    ax.set_xlim(-0.5, top + 0.5)
    ax.set_xlabel(f"score (of {top:g})")
    ax.set_ylabel("submissions")
    ax.yaxis.get_major_locator().set_params(integer=True)
    ax.set_title(f"{data['lesson']}: {len(scores)} submissions")
    fig.tight_layout()
    out = io.BytesIO()
    fig.savefig(out, format="png")
    plt.close(fig)
    return out.getvalue()


def _table(header: list[str], rows: list[list]) -> str:
    cells = "".join(f"<th>{html.escape(h)}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{c}</td>" for c in row) + "</tr>" for row in rows)
    return f"<table><tr>{cells}</tr>{body}</table>"


def _names(names: list[str]) -> str:
    more = f" and {len(names) - SHOWN_NAMES} more" if len(names) > SHOWN_NAMES else ""
    return html.escape(", ".join(names[:SHOWN_NAMES]) + more)


def _seconds(value) -> str:
    return "-" if value is None else f"{value:.0f}"


def page(data: dict, png: bytes) -> str:
    """The report as one HTML page (styles inline, the plot a data: URL)."""
    e = html.escape
    students, tests = data["students"], data["tests"]
    scores = [s["score"] for s in students]
    summary = (f"{len(students)} submissions; mean {statistics.mean(scores):.2f}, median {statistics.median(scores):g} "
               f"of {data['max_score']:g} points" if scores else "no submissions in the gradebook")
    test_rows, failure_blocks = [], []
    for t in tests:
        rate = f"{t['passed'] / t['submissions']:.0%}" if t["submissions"] else "-"
        test_rows.append([f"<code>{e(t['cell'])}</code>", f"{t['points']:g}", f"{t['passed']} / {t['submissions']}", rate])
        if t["failures"]:
            items = "".join(f"<li><b>{n}</b> &times; <code>{e(message)}</code> <span class=who>({_names(t['who'][message])})"
                            "</span></li>" for message, n in t["failures"].most_common(SHOWN_MESSAGES))
            rest = len(t["failures"]) - SHOWN_MESSAGES
            items += f"<li>and {rest} other messages (the CSV lists every failed cell)</li>" if rest > 0 else ""
            failure_blocks.append(f"<h3><code>{e(t['cell'])}</code>: {sum(t['failures'].values())} failed</h3><ol>{items}</ol>")
    incidents = [[e(s["student"])] + [e(", ".join(s[k])) or "-" for k in (grade.TIMEOUT, grade.DIED, grade.NOT_RUN)]
                 for s in students if any(s[k] for k in (grade.TIMEOUT, grade.DIED, grade.NOT_RUN))]
    ungraded = [[e(student), f"<code>{e(cell)}</code>", f"{points:g}"] for student, cell, points in data["ungraded"]]
    timed = [s["seconds"] for s in students if s["seconds"] is not None]
    sped = any(s["speedup"] is not None for s in students)  # lesson 09 prints its measured speed-up
    times = [[e(s["student"]), f"{s['score']:g} / {s['max_score']:g}", _seconds(s["seconds"])]
             + ["-" if s["speedup"] is None else f"{s['speedup']:.2f}x"] * sped for s in students]
    time_note = (f"{len(timed)} timed: median {statistics.median(timed):.0f} s, longest {max(timed):.0f} s." if timed else
                 "Not timed: the submissions were graded with a plain <code>nbgrader autograde</code>; "
                 "<code>make grade</code> times each one.")
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{e(data['lesson'])}: class report</title>
<style>
body {{ font-family: system-ui, sans-serif; max-width: 60rem; margin: 2rem auto; padding: 0 1rem; color: #222; }}
table {{ border-collapse: collapse; margin: 0.5rem 0 1.5rem; }}
th, td {{ border: 1px solid #ccc; padding: 0.25rem 0.6rem; text-align: left; vertical-align: top; }}
th {{ background: #f3f3f3; }} .who {{ color: #666; }} img {{ max-width: 100%; }}
</style></head><body>
<h1>{e(data['lesson'])}: class report</h1>
<p id="summary">{e(summary)}. Scores are nbgrader's (the gradebook), hand-graded answers included;
{len(data['ungraded'])} written answers still wait for a person (each counts 0 until graded).</p>
<h2>Score distribution</h2>
<img id="scores" alt="histogram of the class's scores" src="data:image/png;base64,{base64.b64encode(png).decode()}">
<h2>Test cells</h2>
{_table(["test cell", "points", "passed", "pass rate"], test_rows)}
<h2>Most common failures</h2>
{''.join(failure_blocks) or '<p>No test cell failed.</p>'}
<h2>Timeouts and kernel deaths</h2>
{_table(["student", "timed out", "killed the kernel", "not run"], incidents) if incidents else '<p>None.</p>'}
<h2>Written answers still ungraded</h2>
{_table(["student", "answer", "points"], ungraded) if ungraded else '<p>None: every written answer is graded.</p>'}
<h2>Grading time per submission</h2>
<p>{time_note}</p>
{_table(["student", "score", "seconds"] + ["speed-up (measured, not graded)"] * sped, times)}
</body></html>
"""


def rows(data: dict) -> list[dict]:
    """The CSV: one row per submission, one column per test cell (its score)."""
    out = []
    for s in data["students"]:
        row = {"student": s["student"], "score": s["score"], "max_score": s["max_score"],
               "grading_seconds": "" if s["seconds"] is None else round(s["seconds"], 1),
               "speedup": "" if s["speedup"] is None else s["speedup"],
               "failed": " ".join(s["failed"]), "ungraded": " ".join(s["ungraded"]),
               "timed_out": " ".join(s[grade.TIMEOUT]), "kernel_died": " ".join(s[grade.DIED]),
               "not_run": " ".join(s[grade.NOT_RUN])}
        row.update({t["cell"]: s["cells"].get(t["cell"], "") for t in data["tests"]})
        out.append(row)
    return out


def write(course: Path, lesson: str, out: Path | None = None) -> tuple[Path, Path, dict]:
    """Write ``out``/LESSON.html and .csv (``out`` defaults to the course's reports/); their paths and the numbers."""
    data = collect(course, lesson)
    out = out or course / grade.REPORTS
    out.mkdir(parents=True, exist_ok=True)
    page_path, csv_path = out / f"{lesson}.html", out / f"{lesson}.csv"
    page_path.write_text(page(data, histogram(data)))
    table = rows(data)
    header = list(table[0]) if table else ["student", "score", "max_score"]
    with csv_path.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=header)
        writer.writeheader()
        writer.writerows(table)
    return page_path, csv_path, data


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("lesson", help="the assignment, e.g. 02_tensors_on_device")
    parser.add_argument("--course", type=Path, default=Path.cwd(), help="the course directory (default: here)")
    parser.add_argument("--out", type=Path, help="where the page and the CSV go (default: the course's reports/)")
    args = parser.parse_args(argv)
    if not (args.course / "gradebook.db").exists():
        parser.error(f"no gradebook.db in {args.course}: grade first (make grade LESSON={args.lesson})")
    from nbgrader.api import MissingEntry

    try:
        page_path, csv_path, data = write(args.course, args.lesson, args.out)
    except MissingEntry:
        parser.error(f"the gradebook has no assignment {args.lesson}: grade it first (make grade LESSON={args.lesson})")
    passed = ", ".join(f"{t['cell']} {t['passed']}/{t['submissions']}" for t in data["tests"])
    print(f"{len(data['students'])} submissions of {args.lesson} (passed: {passed}); wrote {page_path} and {csv_path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
