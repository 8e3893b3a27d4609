"""The SM-clock diagnostics around a timing (drkernel.env.measure.gpu_clock) read NVML and name the active
clock-event reasons; without NVML they are absent, not an error."""

from __future__ import annotations

import sys
import types

from drkernel.env.measure import gpu_clock


def test_clock_and_reasons_are_read_through_nvml(monkeypatch):
    fake = types.SimpleNamespace(
        NVML_CLOCK_SM=1,
        nvmlInit=lambda: None,
        nvmlDeviceGetHandleByIndex=lambda i: ("handle", i),
        nvmlDeviceGetClockInfo=lambda h, kind: 1755 if h == ("handle", 1) and kind == 1 else -1,
        nvmlDeviceGetCurrentClocksEventReasons=lambda h: 0x4 | 0x20,
    )
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    gpu_clock._handle.cache_clear()
    try:
        assert gpu_clock.sample("cuda:1") == {"sm_mhz": 1755, "throttle": ["sw_power_cap", "sw_thermal"]}
    finally:
        gpu_clock._handle.cache_clear()


def test_without_nvml_there_is_no_sample(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", None)  # import fails
    gpu_clock._handle.cache_clear()
    try:
        assert gpu_clock.sample("cuda") is None
    finally:
        gpu_clock._handle.cache_clear()
