"""The GPU's SM clock and throttle reasons around a timed region (diagnostics, through NVML).

A compute-bound kernel's time moves with the SM clock, which the GPU lowers under sustained power
or heat; a memory-bound one's hardly does. ``details["timing"]["sm_clock_mhz"]`` (the clock when
the region opened and when its last call returned) and ``throttle`` (NVML's clock-event reasons
active then, by name) let a spread between evaluations be traced to the clock. Absent when NVML
(the ``nvidia-ml-py`` package) is not installed or the device cannot be read.
"""

from __future__ import annotations

import functools
from typing import Any

_REASONS = {0x1: "gpu_idle", 0x2: "applications_clocks", 0x4: "sw_power_cap", 0x8: "hw_slowdown",
            0x20: "sw_thermal", 0x40: "hw_thermal", 0x80: "hw_power_brake", 0x100: "display_clocks"}


@functools.cache
def _handle(index: int) -> Any:
    try:
        import pynvml

        pynvml.nvmlInit()
        return pynvml.nvmlDeviceGetHandleByIndex(index)
    except Exception:  # noqa: BLE001 - no NVML: no diagnostics
        return None


def sample(device: str) -> dict[str, Any] | None:
    """``{"sm_mhz": int, "throttle": [reason, ...]}`` of CUDA device ``device`` now, or None."""
    index = int(device.split(":")[1]) if ":" in device else 0
    handle = _handle(index)
    if handle is None:
        return None
    try:
        import pynvml

        mhz = int(pynvml.nvmlDeviceGetClockInfo(handle, pynvml.NVML_CLOCK_SM))
        mask = int(pynvml.nvmlDeviceGetCurrentClocksEventReasons(handle))
    except Exception:  # noqa: BLE001
        return None
    return {"sm_mhz": mhz, "throttle": [name for bit, name in _REASONS.items() if mask & bit]}


__all__ = ["sample"]
