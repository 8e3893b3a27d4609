"""Where a GPU worker's start goes: CUDA context, the first CUDA profiler (CUPTI) session's enter and
exit, a second session; alone and with N processes starting at once (do starts serialise?).

    python tests/benchmarks/diagnostics/cupti_start.py [--concurrent 1,8] [--gpus 4]

``--gpus G`` spreads the N processes over G GPUs (process i sees GPU i mod G only, as the grader's
workers do): whether starts on different GPUs of one host serialise too.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

CHILD = r'''
import json, time
t0 = time.perf_counter()
import torch
from torch.profiler import ProfilerActivity, profile
parts = {"import": time.perf_counter() - t0}
def lap(name):
    global t0
    now = time.perf_counter(); parts[name] = round(now - t0, 4); t0 = now
t0 = time.perf_counter()
torch.cuda.init(); torch.empty(1, device="cuda"); torch.cuda.synchronize(); lap("cuda_context")
p = profile(activities=[ProfilerActivity.CUDA]); p.__enter__(); lap("cupti_enter_1")
torch.empty(1, device="cuda").add_(1); torch.cuda.synchronize(); lap("work_1")
p.__exit__(None, None, None); lap("cupti_exit_1")
p = profile(activities=[ProfilerActivity.CUDA]); p.__enter__(); lap("cupti_enter_2")
torch.empty(1, device="cuda").add_(1); torch.cuda.synchronize()
p.__exit__(None, None, None); lap("cupti_exit_2")
print(json.dumps(parts))
'''


def run(n: int, gpus: int = 0) -> dict:
    t0 = time.perf_counter()
    procs = [subprocess.Popen([sys.executable, "-c", CHILD], stdout=subprocess.PIPE, text=True,
                              env={**os.environ, "CUDA_VISIBLE_DEVICES": str(i % gpus)} if gpus else None)
             for i in range(n)]
    outs = [json.loads(p.communicate()[0].strip().splitlines()[-1]) for p in procs]
    wall = time.perf_counter() - t0
    keys = outs[0].keys()
    mean = {k: round(sum(o[k] for o in outs) / n, 3) for k in keys}
    return {"processes": n, "gpus": gpus or None, "wall_s": round(wall, 2), "mean_s": mean, "max_s": {k: max(o[k] for o in outs) for k in keys}}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--concurrent", default="1,8")
    ap.add_argument("--gpus", type=int, default=0, help="spread the processes over this many GPUs (0: as inherited)")
    args = ap.parse_args()
    rows = [run(int(n), args.gpus) for n in args.concurrent.split(",")]
    for r in rows:
        print(json.dumps(r))
    return 0


if __name__ == "__main__":
    sys.exit(main())
