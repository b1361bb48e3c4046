"""The GPU's state before and after a run, through nvidia-ml-py (a dependency of the kit): was the
GPU shared, busy or sliced while the claims were timed?"""

from __future__ import annotations

BUSY_PERCENT = 10  # utilisation before the run above this: another job is computing on the GPU


def _fields(nv, handle) -> dict:
    """Each field read on its own: one a GPU does not support (MIG on a T4) is None."""
    sm = nv.NVML_CLOCK_SM
    reads = {
        "name": lambda: str(nv.nvmlDeviceGetName(handle)),
        "utilization_percent": lambda: nv.nvmlDeviceGetUtilizationRates(handle).gpu,
        "sm_clock_mhz": lambda: nv.nvmlDeviceGetClockInfo(handle, sm),
        "sm_clock_max_mhz": lambda: nv.nvmlDeviceGetMaxClockInfo(handle, sm),
        "power_limit_w": lambda: nv.nvmlDeviceGetPowerManagementLimit(handle) / 1000,
        "processes": lambda: [
            {"pid": p.pid, "used_mib": (p.usedGpuMemory or 0) // 2**20}
            for p in nv.nvmlDeviceGetComputeRunningProcesses(handle)
        ],
        "mig": lambda: "enabled" if nv.nvmlDeviceGetMigMode(handle)[0] else "disabled",
    }
    state = {}
    for key, read in reads.items():
        try:
            state[key] = read()
        except Exception:  # noqa: BLE001 (NVML raises one error class per status)
            state[key] = None
    return state


def gpu_state(nv=None) -> dict:
    """{"gpus": [per GPU: name, utilisation, SM clock and its maximum, power limit, compute
    processes, MIG mode]}, or {"error": why} where NVML cannot be read."""
    try:
        if nv is None:
            import pynvml as nv
        nv.nvmlInit()
    except Exception as exc:  # noqa: BLE001 (not installed, or no driver: NVMLError_LibraryNotFound)
        return {"error": f"not read: {type(exc).__name__}: {exc}"}
    try:
        handles = [nv.nvmlDeviceGetHandleByIndex(i) for i in range(nv.nvmlDeviceGetCount())]
        return {"gpus": [{"index": i, **_fields(nv, handle)} for i, handle in enumerate(handles)]}
    except Exception as exc:  # noqa: BLE001
        return {"error": f"{type(exc).__name__}: {exc}"}
    finally:
        nv.nvmlShutdown()


def busy_reasons(state: dict | None, when: str = "before the run") -> list[str]:
    """Why timings on this GPU may not be the lesson's: other compute processes, high utilisation,
    a MIG slice."""
    reasons = []
    for gpu in (state or {}).get("gpus") or []:
        label = f"GPU {gpu['index']} ({gpu.get('name')})"
        if gpu.get("processes"):
            reasons.append(f"{label}: {len(gpu['processes'])} other compute process(es) {when}")
        if (gpu.get("utilization_percent") or 0) > BUSY_PERCENT:
            reasons.append(f"{label}: {gpu['utilization_percent']}% utilised {when}")
        if gpu.get("mig") == "enabled":
            reasons.append(f"{label}: MIG mode on (a slice of the GPU: timings are a fraction)")
    return reasons
