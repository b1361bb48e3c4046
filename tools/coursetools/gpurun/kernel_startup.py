"""The GPU runner's start-up file for each lesson's kernel (copied into an IPython profile by
runs.py).

GPUCOURSE_CLAIMS_DEFER=1: a false claim in strict mode is recorded and printed, and its cell goes
on, so the claims after it are measured too; the runner fails the lesson from its claims file.
GPUCOURSE_REHEARSAL=1 (a CPU rehearsal): each claim and precondition the lesson would check on a GPU
is recorded as "not checked". Not imported by the runner itself: it runs inside the kernel, where
gpucourse is importable."""

import json
import os

DEFER, REHEARSAL = (
    os.environ.get("GPUCOURSE_CLAIMS_DEFER") == "1",
    os.environ.get("GPUCOURSE_REHEARSAL") == "1",
)


def _record(entry: dict) -> None:
    path = os.environ.get("GPUCOURSE_CLAIMS")
    if path:
        with open(path, "a", encoding="utf-8") as f:
            f.write(json.dumps(entry) + "\n")


def _bound(bounds: dict) -> str:
    words = (("at least", bounds.get("at_least")), ("at most", bounds.get("at_most")))
    return " and ".join(f"{w} {v:g}{bounds.get('unit', '')}" for w, v in words if v is not None)


def _install(claims) -> None:
    if DEFER:
        claims.gpu_required = lambda: False  # claim() records and prints a false claim, and returns
    if REHEARSAL:
        checked_claim, checked_needs = claims.claim, claims.needs

        def claim(text, measured, *, device, **bounds):
            result = checked_claim(text, measured, device=device, **bounds)
            if result is None and measured is not None:  # not on CUDA: what a GPU would check
                _record(
                    {
                        "kind": "claim",
                        "claim": text,
                        "measured": float(measured),
                        "bound": _bound(bounds),
                        "unit": bounds.get("unit", ""),
                        "passed": None,
                        "checked": False,
                        "device": str(device),
                        "source": bounds.get("source", ""),
                    }
                )
            return result

        def needs(what, met, *, device, why=""):
            if str(device).split(":")[0] != "cuda":
                _record(
                    {
                        "kind": "precondition",
                        "what": what,
                        "met": bool(met),
                        "why": why,
                        "checked": False,
                        "device": str(device),
                    }
                )
            return checked_needs(what, met, device=device, why=why)

        claims.claim, claims.needs = claim, needs


if DEFER or REHEARSAL:
    try:
        from gpucourse import claims as _claims
    except Exception as exc:  # noqa: BLE001 (the lesson's own import says what is wrong)
        print(f"gpurun start-up: gpucourse.claims is not importable ({exc})")
    else:
        _install(_claims)
