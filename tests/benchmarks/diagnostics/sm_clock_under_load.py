"""Does the SM clock move while a compute-bound kernel runs back to back (CUDA + NVML only)?

A 4096^3 fp32 matmul (TF32 off) in three phases (2 ms sleeps between calls, none, 2 ms sleeps)
while a thread samples NVML every millisecond: SM clock, clock-event reasons, power, temperature.
drkernel.env.measure.gpu_clock samples the clock only when a timing opens and when its last call returns;
this shows whether the clock moves in between.

H100, 2026-11-26: 1980 MHz throughout, no clock-event reason, at most 639 W, 35-52 C; the matmul
took 2.726 ms back to back and 2.752-2.757 ms with idle gaps (the first kernel after a gap is
slower: drkernel's timing keeps the GPU busy with its launch-budget hold before every call).

    python tests/benchmarks/diagnostics/sm_clock_under_load.py
"""

from __future__ import annotations

import threading
import time

import pynvml

from cross_process_interference import matmul_times  # (this directory: run as a script)


def main() -> None:
    pynvml.nvmlInit()
    handle = pynvml.nvmlDeviceGetHandleByIndex(0)
    samples: list[tuple[float, int, int, float, int]] = []
    stop = threading.Event()

    def poll() -> None:
        while not stop.is_set():
            samples.append((time.perf_counter(), pynvml.nvmlDeviceGetClockInfo(handle, pynvml.NVML_CLOCK_SM),
                            pynvml.nvmlDeviceGetCurrentClocksEventReasons(handle),
                            pynvml.nvmlDeviceGetPowerUsage(handle) / 1000, pynvml.nvmlDeviceGetTemperature(handle, 0)))
            time.sleep(0.001)

    threading.Thread(target=poll, daemon=True).start()
    for sleep_s, n in ((0.002, 300), (0.0, 600), (0.002, 300)):
        t0 = time.perf_counter()
        ts = matmul_times(n, sleep_s)
        t1 = time.perf_counter()
        win = [x for x in samples if t0 <= x[0] <= t1]
        clocks = sorted(x[1] for x in win)
        reasons: dict[int, int] = {}
        for x in win:
            reasons[x[2]] = reasons.get(x[2], 0) + 1
        q = sorted(ts)
        print(f"sleep {sleep_s * 1e3:.0f} ms: matmul median {q[len(q) // 2]:.3f} p10 {q[len(q) // 10]:.3f} "
              f"p90 {q[9 * len(q) // 10]:.3f} ms | SM clock min {clocks[0]} median {clocks[len(clocks) // 2]} "
              f"max {clocks[-1]} MHz | reasons {reasons} | power max {max(x[3] for x in win):.0f} W, "
              f"temperature {win[0][4]} -> {win[-1][4]} C", flush=True)
    stop.set()


if __name__ == "__main__":
    main()
