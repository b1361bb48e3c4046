"""The GPU's state before and after a run: was it shared, busy or sliced while the claims were
timed?

Read through nvidia-ml-py (``pynvml``) where it imports, else through NVML with ctypes. Standard
library only."""

from __future__ import annotations

import ctypes
import os

BUSY_PERCENT = 10  # utilisation before the run above this: another job is computing on the GPU
NVML_CLOCK_SM, NVML_INSUFFICIENT_SIZE = 1, 7


class PynvmlReader:
    """The fields, through nvidia-ml-py."""

    source = "nvidia-ml-py"

    def __init__(self, pynvml):
        self.nv = pynvml
        self.nv.nvmlInit()

    def count(self) -> int:
        return self.nv.nvmlDeviceGetCount()

    def read(self, index: int) -> dict:
        nv, handle = self.nv, self.nv.nvmlDeviceGetHandleByIndex(index)
        processes = lambda: [  # noqa: E731
            {"pid": p.pid, "used_mib": (p.usedGpuMemory or 0) // 2**20}
            for p in nv.nvmlDeviceGetComputeRunningProcesses(handle)
        ]
        fields = {
            "name": lambda: _text(nv.nvmlDeviceGetName(handle)),
            "utilization_percent": lambda: nv.nvmlDeviceGetUtilizationRates(handle).gpu,
            "sm_clock_mhz": lambda: nv.nvmlDeviceGetClockInfo(handle, NVML_CLOCK_SM),
            "sm_clock_max_mhz": lambda: nv.nvmlDeviceGetMaxClockInfo(handle, NVML_CLOCK_SM),
            "power_limit_w": lambda: nv.nvmlDeviceGetPowerManagementLimit(handle) / 1000,
            "processes": processes,
            "mig": lambda: "enabled" if nv.nvmlDeviceGetMigMode(handle)[0] else "disabled",
        }
        return _guarded(fields)

    def close(self) -> None:
        self.nv.nvmlShutdown()


class _Utilization(ctypes.Structure):
    _fields_ = [("gpu", ctypes.c_uint), ("memory", ctypes.c_uint)]


class CtypesReader:
    """The same fields through the driver's library (the process list as a count: its struct
    changes)."""

    source = "NVML through ctypes"

    def __init__(self, lib):
        self.lib = lib
        _check((getattr(lib, "nvmlInit_v2", None) or lib.nvmlInit)(), "nvmlInit")

    def count(self) -> int:
        count = ctypes.c_uint(0)
        _check(self.lib.nvmlDeviceGetCount_v2(ctypes.byref(count)), "nvmlDeviceGetCount")
        return count.value

    def _uint(self, function: str, handle, *args) -> int:
        value = ctypes.c_uint(0)
        _check(getattr(self.lib, function)(handle, *args, ctypes.byref(value)), function)
        return value.value

    def read(self, index: int) -> dict:
        lib, handle = self.lib, ctypes.c_void_p()
        _check(
            lib.nvmlDeviceGetHandleByIndex_v2(index, ctypes.byref(handle)), "nvmlDeviceGetHandle"
        )

        def name():
            buffer = ctypes.create_string_buffer(96)
            _check(lib.nvmlDeviceGetName(handle, buffer, 96), "nvmlDeviceGetName")
            return buffer.value.decode()

        def utilization():
            rates = _Utilization()
            _check(lib.nvmlDeviceGetUtilizationRates(handle, ctypes.byref(rates)), "utilization")
            return rates.gpu

        def processes():
            count = ctypes.c_uint(0)
            status = lib.nvmlDeviceGetComputeRunningProcesses_v3(handle, ctypes.byref(count), None)
            if status not in (0, NVML_INSUFFICIENT_SIZE):
                _check(status, "nvmlDeviceGetComputeRunningProcesses")
            return [{"pid": None, "used_mib": None}] * count.value

        def mig():
            current, pending = ctypes.c_uint(0), ctypes.c_uint(0)
            _check(
                lib.nvmlDeviceGetMigMode(handle, ctypes.byref(current), ctypes.byref(pending)),
                "mig",
            )
            return "enabled" if current.value else "disabled"

        return _guarded(
            {
                "name": name,
                "utilization_percent": utilization,
                "sm_clock_mhz": lambda: self._uint("nvmlDeviceGetClockInfo", handle, NVML_CLOCK_SM),
                "sm_clock_max_mhz": lambda: self._uint(
                    "nvmlDeviceGetMaxClockInfo", handle, NVML_CLOCK_SM
                ),
                "power_limit_w": lambda: (
                    self._uint("nvmlDeviceGetPowerManagementLimit", handle) / 1000
                ),
                "processes": processes,
                "mig": mig,
            }
        )

    def close(self) -> None:
        self.lib.nvmlShutdown()


def _check(status: int, what: str) -> None:
    if status != 0:
        raise OSError(f"{what} returned NVML error {status}")


def _text(value) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _guarded(fields: dict) -> dict:
    """Each field read on its own: a field a GPU does not support (MIG on a T4) is None."""
    state = {}
    for key, read in fields.items():
        try:
            state[key] = read()
        except Exception:  # noqa: BLE001 (NVML raises its own error classes, one per status)
            state[key] = None
    return state


def reader():
    """The NVML reader this machine offers: nvidia-ml-py first, else ctypes; None (and why) without
    a driver."""
    try:
        import pynvml

        return PynvmlReader(pynvml), ""
    except Exception as exc:  # noqa: BLE001 (not installed, or no driver: NVMLError_LibraryNotFound)
        why = f"nvidia-ml-py: {type(exc).__name__}"
    from .preflight import _nvml_library

    lib, error = _nvml_library()
    if lib is None:
        return None, f"{why}; {error}"
    try:
        return CtypesReader(lib), ""
    except OSError as exc:
        return None, f"{why}; {exc}"


def gpu_state(make_reader=reader) -> dict:
    """{"source", "gpus": [per GPU: name, utilisation, SM clock and its maximum, power limit,
    compute processes, MIG mode]} or {"error": why} where NVML cannot be read."""
    found, why = make_reader()
    if found is None:
        return {"error": why}
    try:
        gpus = [{"index": i, **found.read(i)} for i in range(found.count())]
    except Exception as exc:  # noqa: BLE001
        return {"error": f"{type(exc).__name__}: {exc}"}
    finally:
        found.close()
    return {"source": found.source, "gpus": gpus, "pid": os.getpid()}


def busy_reasons(state: dict | None) -> list[str]:
    """Why timings on this GPU may not be the lesson's: other compute processes, high utilisation, a
    MIG slice, from a state read before the run (the runner's own processes have not started yet).
    """
    reasons = []
    for gpu in (state or {}).get("gpus") or []:
        label = f"GPU {gpu['index']} ({gpu.get('name')})"
        others = gpu.get("processes") or []
        if others:
            reasons.append(f"{label}: {len(others)} other compute process(es) on it")
        if (gpu.get("utilization_percent") or 0) > BUSY_PERCENT:
            reasons.append(f"{label}: {gpu['utilization_percent']}% utilised before the run")
        if gpu.get("mig") == "enabled":
            reasons.append(
                f"{label}: MIG mode on (a slice of the GPU: timings are a fraction of it)"
            )
    return reasons
