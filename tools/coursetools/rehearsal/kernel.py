"""A kernel that rehearses the CUDA path from its start (an IPython start-up file), and a notebook
run through one (``python -m coursetools.rehearsal t4 NOTEBOOK``)."""

from __future__ import annotations

import json
import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from coursetools.rehearsal import REHEARSE_VAR

_STARTUP = """\
# The CUDA rehearsal (coursetools.rehearsal): this kernel runs the CUDA path on its CPU.
import os as _os

if _os.environ.get("{var}"):
    from coursetools import rehearsal as _rehearsal

    _rehearsal.KERNEL = _rehearsal.parse(_os.environ["{var}"]).__enter__()
"""


def ipython_dir(folder) -> str:
    """An IPYTHONDIR whose kernels rehearse what ``GPUCOURSE_REHEARSE`` names (unset: nothing)."""
    startup = Path(folder) / "profile_default" / "startup"
    startup.mkdir(parents=True, exist_ok=True)
    (startup / "00-cuda-rehearsal.py").write_text(_STARTUP.format(var=REHEARSE_VAR))
    return str(folder)


@dataclass
class Run:
    """A notebook's run under a rehearsal: each failed cell's error, and every claim it made."""

    notebook: object
    errors: dict = field(default_factory=dict)  # grade_id (or "cell N") -> "Name: message"
    not_run: list = field(default_factory=list)  # GPU checks whose measurement was left out
    claims: list = field(default_factory=list)  # gpucourse.claims' records

    def claim(self, starts: str) -> dict:
        (found,) = [c for c in self.claims if c.get("claim", c.get("what", "")).startswith(starts)]
        return found


def run(nb, spec: str, *, cwd, skip_tags=("demo",), grading=True, timeout=600) -> Run:
    """Execute ``nb`` (a NotebookNode; changed in place) in a kernel rehearsing ``spec`` ("t4",
    "h100:8", "t4:1:dali"), from ``cwd``; cells tagged ``skip_tags`` are left out, and
    ``grading`` runs it at nbgrader's sizes (``NBGRADER_EXECUTION``)."""
    from nbclient import NotebookClient

    nb.cells = [
        c
        for c in nb.cells
        if not (c.cell_type == "code" and set(c.metadata.get("tags", [])) & set(skip_tags))
    ]
    with tempfile.TemporaryDirectory(prefix="rehearsal-") as tmp:
        claims = Path(tmp) / "claims.jsonl"
        env = {REHEARSE_VAR: spec, "IPYTHONDIR": ipython_dir(tmp), "GPUCOURSE_CLAIMS": str(claims)}
        env |= {"NBGRADER_EXECUTION": "autograde"} if grading else {}
        saved = {name: os.environ.get(name) for name in (*env, "NBGRADER_EXECUTION")}
        os.environ.update(env)
        try:
            client = NotebookClient(
                nb,
                timeout=timeout,
                kernel_name="python3",
                allow_errors=True,
                resources={"metadata": {"path": str(cwd)}},
            )
            client.execute()
        finally:
            for name, value in saved.items():
                os.environ.pop(name, None) if value is None else os.environ.update({name: value})
        records = claims.read_text().splitlines() if claims.exists() else []
    result = Run(nb, claims=[json.loads(line) for line in records])
    for index, cell in enumerate(nb.cells):
        for output in cell.get("outputs", []):
            if output.output_type == "error":
                name = cell.metadata.get("nbgrader", {}).get("grade_id") or f"cell {index}"
                if output.ename == "NameError" and "gpu-check" in cell.metadata.get("tags", []):
                    result.not_run.append(name)  # it checks a demo's measurement: not made
                else:
                    result.errors[name] = f"{output.ename}: {output.evalue}"
    return result
