"""What a lesson says a GPU does, as checks: measured on CUDA, printed with the device, collected.

``claim`` checks one statement when the work ran on CUDA and, on any other device, says in one
sentence what it would check; ``measured=None`` (the measurement did not happen: no DALI, no
compiler) records that it did not run, never a pass or a failure. ``needs`` states a
precondition of a lesson's GPU path (two GPUs, a C compiler, a TensorFlow that sees the GPU); an
unmet one is "not validated on GPU", never passed.
Both append one JSON line to the file named by ``GPUCOURSE_CLAIMS`` when it is set (the GPU runner
sets it per lesson); off CUDA the line says ``"checked": false`` and keeps the measured value, so a
CPU rehearsal records what a GPU would check. In strict mode (``GPUCOURSE_REQUIRE_GPU=1``) a failed
claim raises, so the lesson fails; elsewhere it prints the failure and the lesson goes on. With
``GPUCOURSE_CLAIMS_DEFER=1`` as well (the GPU runner sets it), a failed claim in strict mode is
printed and recorded but does not raise: the runner fails the lesson at the end from the record, so
the claims after it are still measured.
"""

import json
import os

from .device import REQUIRE_GPU_VAR, gpu_required

CLAIMS_VAR = "GPUCOURSE_CLAIMS"
DEFER_VAR = "GPUCOURSE_CLAIMS_DEFER"


def _record(entry: dict) -> None:
    path = os.environ.get(CLAIMS_VAR)
    if path:
        with open(path, "a", encoding="utf-8") as f:
            f.write(json.dumps(entry) + "\n")


def _deferred() -> bool:
    return os.environ.get(DEFER_VAR, "").strip().lower() in {"1", "true", "yes", "on"}


def claim(
    text: str,
    measured: float | None,
    *,
    device,
    at_least: float | None = None,
    at_most: float | None = None,
    unit: str = "",
    source: str = "",
) -> bool | None:
    """Check ``at_least <= measured <= at_most`` on CUDA; ``None`` and one sentence elsewhere."""
    if at_least is None and at_most is None:
        raise ValueError("a claim needs a bound: at_least=, at_most= or both")
    bounds = (("at least", at_least), ("at most", at_most))
    bound = " and ".join(f"{word} {value:g}{unit}" for word, value in bounds if value is not None)
    measured = None if measured is None else float(measured)  # NumPy, 0-d tensor: JSON
    entry = {"kind": "claim", "claim": text, "measured": measured, "bound": bound, "unit": unit}
    entry |= {"passed": None, "checked": False, "device": str(device), "source": source}
    if measured is None:
        print(f"Did not run here: {text} ({bound}): its measurement did not happen.")
        _record(entry)
        return None
    value = f"{measured:.3g}{unit}"
    if str(device).split(":")[0] != "cuda":
        here = f"here on {device} it is {value}, not checked"
        print(f"On a CUDA GPU this checks: {text} ({bound}; {here}).")
        _record(entry)
        return None
    passed = (at_least is None or measured >= at_least) and (at_most is None or measured <= at_most)
    verdict = "PASS" if passed else "FAIL"
    cited = f" ({source})" if source else ""
    print(f"GPU claim {verdict} on {device}: {text}: {value}, expected {bound}{cited}.")
    del entry["checked"]  # checked on CUDA: passed or failed
    _record({**entry, "passed": passed})
    if not passed and gpu_required():
        if _deferred():
            print(f"{DEFER_VAR}=1: the lesson goes on; the GPU runner fails it at the end.")
            return passed
        why = f"GPU claim failed with {REQUIRE_GPU_VAR}=1: {text}: {value}, expected {bound}."
        raise RuntimeError(why)
    return passed


def needs(what: str, met: bool, *, device, why: str = "") -> bool:
    """State a precondition of the GPU path; on CUDA an unmet one is recorded as not validated."""
    entry = {"kind": "precondition", "what": what, "met": bool(met), "why": why, "checked": False}
    if str(device).split(":")[0] == "cuda":
        del entry["checked"]
        if not met:
            print(f"Not validated on this GPU: {what}" + (f" ({why})" if why else "") + ".")
    _record({**entry, "device": str(device)})
    return bool(met)
