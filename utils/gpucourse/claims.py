"""What a lesson says a GPU does, as checks: measured on CUDA, printed with the device, collected by the GPU runner.

``claim`` checks one statement when the work ran on CUDA and, on any other device, says in one sentence what it
would check. ``needs`` states a precondition of a lesson's GPU path (two GPUs, a C compiler, a TensorFlow that
sees the GPU); an unmet one is "not validated on GPU", never passed. Both append one JSON line to the file named by
``GPUCOURSE_CLAIMS`` when it is set (the runner sets it per lesson). In strict mode (``GPUCOURSE_REQUIRE_GPU=1``)
a failed claim raises, so the lesson fails; elsewhere it prints the failure and the lesson goes on.
"""

import json
import os

from .device import REQUIRE_GPU_VAR, gpu_required

CLAIMS_VAR = "GPUCOURSE_CLAIMS"


def _record(entry: dict) -> None:
    path = os.environ.get(CLAIMS_VAR)
    if path:
        with open(path, "a", encoding="utf-8") as f:
            f.write(json.dumps(entry) + "\n")


def claim(text: str, measured: float, *, device, at_least: float | None = None, at_most: float | None = None,
          unit: str = "", source: str = "") -> bool | None:
    """Check ``at_least <= measured <= at_most`` on CUDA; ``None`` (and one sentence) on any other device."""
    if at_least is None and at_most is None:
        raise ValueError("a claim needs a bound: at_least=, at_most= or both")
    measured = float(measured)  # a NumPy or 0-d tensor value too; the record is JSON
    bound = " and ".join(f"{word} {value:g}{unit}" for word, value in (("at least", at_least), ("at most", at_most))
                         if value is not None)
    if str(device).split(":")[0] != "cuda":
        print(f"On a CUDA GPU this checks: {text} ({bound}; here on {device} it is {measured:.3g}{unit}, not checked).")
        return None
    passed = (at_least is None or measured >= at_least) and (at_most is None or measured <= at_most)
    print(f"GPU claim {'PASS' if passed else 'FAIL'} on {device}: {text}: {measured:.3g}{unit}, expected {bound}"
          + (f" ({source})" if source else "") + ".")
    _record({"kind": "claim", "claim": text, "measured": measured, "bound": bound, "unit": unit, "passed": passed,
             "device": str(device), "source": source})
    if not passed and gpu_required():
        raise RuntimeError(f"GPU claim failed with {REQUIRE_GPU_VAR}=1: {text}: {measured:.3g}{unit}, expected {bound}.")
    return passed


def needs(what: str, met: bool, *, device, why: str = "") -> bool:
    """State a precondition of the GPU path; on CUDA an unmet one is recorded as not validated. Returns ``met``."""
    if str(device).split(":")[0] == "cuda":
        if not met:
            print(f"Not validated on this GPU: {what}" + (f" ({why})" if why else "") + ".")
        _record({"kind": "precondition", "what": what, "met": bool(met), "why": why, "device": str(device)})
    return bool(met)
