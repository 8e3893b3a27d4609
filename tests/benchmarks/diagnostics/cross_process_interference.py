"""Which activity of another process moves a compute-bound kernel timed in this one (CUDA only).

A 4096^3 fp32 matmul (TF32 off) is timed with CUDA events 300 times while a second process does one
of: nothing; a tiny kernel every 5 ms; 256 MB allocated and freed every 5 ms; a 256 MB host-to-device
copy every 5 ms; CUDA contexts created and destroyed (four processes at a time). Kernels from another
process time-slice the GPU under the timed one; the other activities do not touch the SMs. What the
grader must therefore keep out of a timing: any kernel of another process (drkernel.env.process.worker warms
its sampler at load, inside the GPU gate, not at its start).

H100, 2026-11-26 (median / p90 ms): none 2.761 / 2.781; tiny kernels 2.740 / 3.061; alloc/free
2.753 / 2.778; copies 2.745 / 2.777; contexts 2.722 / 2.743.

    python tests/benchmarks/diagnostics/cross_process_interference.py
"""

from __future__ import annotations

import subprocess
import sys
import threading
import time

import torch

NOISE = {
    "none": None,
    "tiny_kernels": "import torch,time\nx=torch.zeros(1,device='cuda')\nwhile True:\n"
                    "  x.add_(1); torch.cuda.synchronize(); time.sleep(0.005)\n",
    "alloc_free_256MB": "import torch,time\nwhile True:\n"
                        "  y=torch.empty(64<<20,device='cuda'); del y; torch.cuda.empty_cache(); time.sleep(0.005)\n",
    "memcpy_h2d_256MB": "import torch,time\nh=torch.empty(64<<20).pin_memory()\nwhile True:\n"
                        "  d=h.to('cuda',non_blocking=True); torch.cuda.synchronize(); del d; time.sleep(0.005)\n",
    "ctx_create_destroy": None,  # processes that start CUDA and exit, four at a time
}


def contexts_until(stop_at: float) -> None:
    code = "import torch; torch.empty(1, device='cuda'); torch.cuda.synchronize()"
    procs: list[subprocess.Popen] = []
    while time.time() < stop_at:
        procs = [p for p in procs if p.poll() is None]
        while len(procs) < 4:
            procs.append(subprocess.Popen([sys.executable, "-c", code]))
        time.sleep(0.05)
    for p in procs:
        p.wait()


def matmul_times(n: int, sleep_s: float = 0.002) -> list[float]:
    """``n`` times (ms, CUDA events) of a 4096^3 fp32 matmul (TF32 off), each call waited for, with
    ``sleep_s`` of idle host time between calls (sm_clock_under_load.py uses it too)."""
    torch.backends.cuda.matmul.allow_tf32 = False
    a, b = torch.randn(4096, 4096, device="cuda"), torch.randn(4096, 4096, device="cuda")
    for _ in range(10):
        torch.mm(a, b)
    torch.cuda.synchronize()
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    ts = []
    for _ in range(n):
        s.record()
        torch.mm(a, b)
        e.record()
        e.synchronize()
        ts.append(s.elapsed_time(e))
        if sleep_s:
            time.sleep(sleep_s)
    return ts


def measure(n: int = 300) -> str:
    ts = sorted(matmul_times(n))

    def q(f: float) -> float:
        return ts[int(f * (len(ts) - 1))]
    return f"min {ts[0]:.3f} p25 {q(.25):.3f} med {q(.5):.3f} p75 {q(.75):.3f} p90 {q(.9):.3f} max {ts[-1]:.3f}"


def main() -> None:
    torch.empty(1, device="cuda")
    for name, code in NOISE.items():
        proc, thread = None, None
        if name == "ctx_create_destroy":
            thread = threading.Thread(target=contexts_until, args=(time.time() + 10,), daemon=True)
            thread.start()
            time.sleep(3)
        elif code:
            proc = subprocess.Popen([sys.executable, "-c", code])
            time.sleep(4)
        print(f"{name:20s} {measure()}", flush=True)
        if proc is not None:
            proc.kill()
            proc.wait()
        if thread is not None:
            thread.join()
    print(f"{'none, again':20s} {measure()}", flush=True)


if __name__ == "__main__":
    main()
