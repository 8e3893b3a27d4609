"""Does the launch budget's probe (drkernel/env/measure/budget.py) verify a hold that fills the GPU while
another process's kernels time-slice it? CUDA events against GPU-timer stamps (CUDA only).

    python tests/benchmarks/diagnostics/hold_probe_under_load.py [--probes 30]

For each neighbour (none; a 2048^2 matmul loop; a tiny kernel every 1 ms) the hold is probed
``--probes`` times both ways: ``events`` (until 2026-11-27: the probe's end event minus the hold's
end event, side-stream ReLU) and ``stamps`` (now: the probe kernel's start read from %globaltimer
minus the hold's published start + its length). A hold that fills the GPU has a gap >= 0; a gap below
-0.01 ms fails verification and the worker then times without the hold.

H100, 2026-11-27 (failed / probes): none: events 0/30, stamps 0/10; a matmul loop: events 0/30,
stamps 1/10; a tiny kernel every 1 ms: events 2/30, stamps 6/10 (gaps of -0.30 ms: the probe ran at
the hold's start). Neither way is conclusive while another process's kernels time-slice the GPU,
so the grader probes once per device in its exclusive section (budget.device_verdict) and workers
adopt that answer.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

import torch

from drkernel.env.measure import budget as B

NEIGHBOURS = {
    "none": None,
    "matmul_loop": "import torch\nx=torch.randn(2048,2048,device='cuda')\nprint('ready',flush=True)\n"
                   "while True:\n  x@x; torch.cuda.synchronize()\n",
    "tiny_every_1ms": "import torch,time\nx=torch.zeros(1,device='cuda')\nprint('ready',flush=True)\n"
                      "while True:\n  x.add_(1); torch.cuda.synchronize(); time.sleep(0.001)\n",
}


def event_gap(start, blocks) -> float:
    side = torch.cuda.Stream()
    x = torch.zeros(1024, device="cuda")
    hold_end, probe_end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda.synchronize()
    B._launch(start, blocks, B.PROBE_MS)
    hold_end.record()
    with torch.cuda.stream(side):
        x.add_(1.0)
        probe_end.record(side)
    torch.cuda.synchronize()
    return hold_end.elapsed_time(probe_end)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--probes", type=int, default=30)
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    b = B.LaunchBudget.prepare(torch, "cuda")
    out = {"regs_per_thread": b.regs_per_thread, "blocks": b.blocks}
    for name, code in NEIGHBOURS.items():
        proc = None
        if code:
            proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
            proc.stdout.readline()
        try:
            ev = [event_gap(b.start, b.blocks) for _ in range(args.probes)]
            st = [B._probe(torch, b.start, b.blocks) for _ in range(args.probes // 3 or 1)]  # each: min of 3
        finally:
            if proc:
                proc.kill()
                proc.wait()
        out[name] = {"events_ms": ev, "stamps_min_of_3_ms": st,
                     "events_fail": sum(g < -0.01 for g in ev), "stamps_fail": sum(g < -0.01 for g in st)}
        print(f"{name:<15} events: {out[name]['events_fail']}/{len(ev)} below -0.01 ms (min {min(ev):.3f}); "
              f"stamps: {out[name]['stamps_fail']}/{len(st)} (min {min(st):.4f})", flush=True)
    if args.out:
        Path(args.out).write_text(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
