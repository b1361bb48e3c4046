"""What a lesson's GPU path needs of the machine (TensorFlow, DALI and its plugin, two GPUs, a
compiler), and which of those needs this machine leaves unmet: those parts are "not validated",
never passed."""

from __future__ import annotations

from .runs import NEEDS

FRAMEWORKS = ("tensorflow", "dali")
NEED_PART = {"tensorflow": "TensorFlow", "dali": "DALI", "dali-tf": "TensorFlow"}
NO_GPU = "no GPU: a CPU rehearsal"


def need_status(facts: dict) -> dict[str, str | None]:
    """For each need of NEEDS bar "claims" (which depends on the run): None when met here, else why
    not."""
    status: dict[str, str | None] = {}
    for name in FRAMEWORKS:
        info = facts.get(name) or {}
        if not info.get("installed"):
            status[name] = "not installed"
        elif info.get("error"):
            status[name] = f"fails to import ({info['error']})"
        elif name == "tensorflow" and not info.get("gpus"):
            build = (
                "a CPU-only build" if info.get("is_cuda_build") is False else "no CUDA libraries"
            )
            status[name] = (
                f"installed without GPU support: {build}; the GPU set has them "
                "(`make test-gpu GPU=1`)"
            )
        else:
            status[name] = None
    framework = next(
        (f"{NEEDS[n][1]} {status[n]}" for n in ("dali", "tensorflow") if status[n]), None
    )
    status["dali-tf"] = framework or (
        None
        if facts.get("dali_tf_plugin")
        else (
            "not installed: it compiles against TensorFlow (`pip install --no-build-isolation "
            "nvidia-dali-tf-plugin-cuda120==<DALI's version>`; `make` tries it, best effort)"
        )
    )
    gpus = len((facts.get("torch") or {}).get("devices") or [])
    status["two-gpus"] = (
        None
        if gpus >= 2
        else (
            f"{gpus} GPU visible to PyTorch: NCCL, DDP and DataParallel across GPUs did not run "
            "(gloo on the CPU instead)"
        )
    )
    missing = [
        w
        for w, ok in (
            ("C compiler ($CC, gcc or clang)", facts.get("c_compiler")),
            ("Python's headers (Python.h)", facts.get("python_headers")),
        )
        if not ok
    ]
    status["compiler"] = (
        f"no {' and no '.join(missing)}: Inductor and Triton build their kernels' "
        "launchers with them"
        if missing
        else None
    )
    return status


# A need the lesson states itself with claims.needs: its own line replaces the runner's (said once).
STATED = {"compiler": "compiler", "two-gpus": "gpus", "dali-tf": "plugin"}


def unmet_needs(nb: dict, status: dict, rehearsal: bool) -> list[tuple[str, str, str]]:
    """(part, what, why) this lesson's GPU path could not exercise here."""
    stated = []
    for e in nb.get("claims", []):
        if e["kind"] == "precondition" and not e.get("met") and e.get("checked", True):
            what = e.get("what") or "?"
            part = next((p for p in ("TensorFlow", "DALI") if p in what), "PyTorch")
            stated.append((part, what, e.get("why") or "not met on this machine"))
    said = " ".join(what.lower() for _, what, _ in stated)
    found = [
        (NEED_PART.get(n, "PyTorch"), NEEDS[n][1], status[n])
        for n in nb.get("uses", [])
        if status.get(n) and not (n in STATED and STATED[n] in said)
    ]
    found += stated
    if rehearsal:
        found.append(("PyTorch", "the GPU path", NO_GPU))
    return found
