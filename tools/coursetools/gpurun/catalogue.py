"""The claims each lesson makes (its `claims.claim(` calls), so a report can name the ones that did
not run.

A claim's text is a literal, an f-string (its fields match anything) or computed at run time (named
by its cell)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from ..course import code_cells
from ..text import cell_python
from .steps import cell_parts

CLAIM_CALL = re.compile(r"(.+\.)?claims\.claim|claim")  # claims.claim(, gpucourse.claims.claim(


def _text(node: ast.AST | None) -> tuple[str, str | None]:
    """(the claim's text as a reader sees it, a regular expression matching it when run) for its
    first argument."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value, re.escape(node.value)
    if isinstance(node, ast.JoinedStr):
        shown, pattern = "", ""
        for part in node.values:
            if isinstance(part, ast.Constant):
                shown, pattern = shown + str(part.value), pattern + re.escape(str(part.value))
            else:
                shown, pattern = shown + "{" + ast.unparse(part.value) + "}", pattern + ".*?"
        return shown, pattern
    return "", None


def lesson_claims(notebook: Path) -> list[dict]:
    """Each claim call in a notebook: {"cell" (its code cell, as nbval counts), "part", "text",
    "pattern"}."""
    found, cells = [], zip(code_cells(notebook), cell_parts(notebook), strict=True)
    for index, (code, part) in enumerate(cells):
        try:
            tree = ast.parse(cell_python(code))
        except SyntaxError:
            continue
        calls = [n for n in ast.walk(tree) if isinstance(n, ast.Call)]
        for call in (c for c in calls if CLAIM_CALL.fullmatch(ast.unparse(c.func))):
            text, pattern = _text(call.args[0] if call.args else None)
            if not text:
                text = f"the claim computed in code cell {index} ({ast.unparse(call.args[0])})"
            found.append({"cell": index, "part": part, "text": text, "pattern": pattern})
    return found


def match(catalogue: list[dict], recorded: list[dict]) -> tuple[list[dict], list[dict]]:
    """(catalogue entries some recorded claim matched, entries none did); a computed text matches
    any recorded claim that no literal or f-string entry explains."""
    texts = [e.get("claim") or "" for e in recorded if e.get("kind", "claim") == "claim"]
    static = [e for e in catalogue if e["pattern"] is not None]
    explained = {t for t in texts for e in static if re.fullmatch(e["pattern"], t, flags=re.S)}
    ran, missing = [], []
    for entry in catalogue:
        if entry["pattern"] is None:
            hit = any(t not in explained for t in texts)
        else:
            hit = any(re.fullmatch(entry["pattern"], t, flags=re.S) for t in texts)
        (ran if hit else missing).append(entry)
    return ran, missing


def part_of(catalogue: list[dict], text: str) -> str:
    """The part (PyTorch, TensorFlow, DALI) of the cell a recorded claim comes from; PyTorch when
    unknown."""
    for entry in catalogue:
        if entry["pattern"] is not None and re.fullmatch(entry["pattern"], text or "", flags=re.S):
            return entry["part"]
    return "PyTorch"
