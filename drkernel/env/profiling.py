"""Coverage: how much of the candidate's forward runs in its own Triton kernels (PR, PRS input).

On CUDA::

    coverage = sum(device time of kernel events named exactly like a launched own kernel)
               / sum(device time of all kernel, memcpy and memset events of the forward)

Only device-side activity counts (no CPU op time in the denominator, no aten op counted twice),
and names match exactly — not by substring either way, which let a kernel called ``mm`` claim
cuBLAS time in KernelGYM (drkernel-reference.md §9.21).

On the CPU interpreter there is no device: coverage is the share of forward wall time spent inside
the candidate's own Triton launches (interpreted kernels run inside the launch call).
"""

from __future__ import annotations

from typing import Any


def measure_coverage(h: Any, msg: dict[str, Any]) -> dict[str, Any]:
    torch = h.torch
    inputs = h.pool_inputs(msg["seed"])
    calls = int(msg.get("calls", 3))
    if not h.device.startswith("cuda"):
        launch_s = call_s = 0.0
        names: set[str] = set()
        for _ in range(calls):
            h.recorder.reset()
            import time

            t0 = time.perf_counter()
            with torch.no_grad():
                h.model(*inputs)
            call_s += time.perf_counter() - t0
            launch_s += h.recorder.seconds
            names |= set(h.recorder.counts)
        cov = min(launch_s / call_s, 1.0) if call_s > 0 else 0.0
        return {"ok": True, "coverage": cov, "own_us": launch_s * 1e6 / calls, "total_us": call_s * 1e6 / calls,
                "kernels": sorted(names), "method": "cpu_wall_share"}

    from torch.profiler import ProfilerActivity, profile

    with torch.no_grad():
        h.recorder.reset()
        h.model(*inputs)  # warm: compile outside the profile
        own_names = set(h.recorder.counts)
        h.sync()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for _ in range(calls):
                h.recorder.reset()
                h.model(*inputs)
                own_names |= set(h.recorder.counts)
            h.sync()
    per_name: dict[str, float] = {}
    for ev in prof.events():
        dev_type = str(getattr(ev, "device_type", ""))
        if "CUDA" not in dev_type:
            continue
        us = float(getattr(ev, "device_time", 0.0) or getattr(ev, "cuda_time", 0.0) or 0.0)
        if us <= 0:
            continue
        per_name[ev.name] = per_name.get(ev.name, 0.0) + us
    total = sum(per_name.values())
    own = sum(us for name, us in per_name.items() if name in own_names)
    top = sorted(per_name.items(), key=lambda kv: -kv[1])[:8]
    return {"ok": True, "coverage": (own / total) if total > 0 else None, "own_us": own / calls,
            "total_us": total / calls, "kernels": sorted(own_names), "method": "cuda_profiler",
            "top": [{"name": n[:120], "us": us / calls, "own": n in own_names} for n, us in top]}
