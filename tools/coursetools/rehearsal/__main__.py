"""``python -m coursetools.rehearsal MACHINE NOTEBOOK [--full]``: run a lesson on the CUDA path
rehearsed on this CPU; print its failed cells and its claims. MACHINE: "t4", "h100:8",
"t4:1:dali,compiler" (machine:gpus:gaps; coursetools.rehearsal lists them)."""

import argparse
import sys
from pathlib import Path

import nbformat

from coursetools.rehearsal import GAPS, MACHINES
from coursetools.rehearsal.kernel import run

parser = argparse.ArgumentParser(prog="python -m coursetools.rehearsal", description=__doc__)
parser.add_argument("machine", help=f"{', '.join(MACHINES)}[:gpus[:gaps]]; gaps: {', '.join(GAPS)}")
parser.add_argument("notebook", type=Path)
parser.add_argument("--full", action="store_true", help="the learner's sizes and demo cells too")
args = parser.parse_args()
nb = nbformat.read(args.notebook, as_version=4)
skip = () if args.full else ("demo",)
result = run(nb, args.machine, cwd=args.notebook.parent, skip_tags=skip, grading=not args.full)
for entry in result.claims:
    if entry["kind"] == "precondition":
        verdict = "met" if entry["met"] else "not met"
    else:
        verdict = {True: "PASS", False: "FAIL", None: "did not run"}[entry.get("passed")]
    print(f"{verdict:>11}  {entry.get('claim') or entry.get('what')}: {entry.get('measured', '')}")
for cell, error in result.errors.items():
    print(f"{cell}: {error[:300]}")
if result.not_run:
    print(
        f"GPU checks of demo measurements, not run: {', '.join(result.not_run)} (--full runs them)"
    )
print("Timings are this CPU's: a claim on seconds or speed-ups means nothing here.")
print(f"{len(result.errors)} cell(s) failed under the {args.machine} rehearsal")
sys.exit(1 if result.errors else 0)
