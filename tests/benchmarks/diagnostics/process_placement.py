"""Does a kernel's time depend on the process it runs in? Fresh processes, one after another (CUDA only).

    python tests/benchmarks/diagnostics/process_placement.py [--task 18_matmul_square] [--procs 12]

Each child process loads the suite's solution, then times it in ``--rounds`` rounds of ``--calls``
calls with the grader's protocol (L2 flush, a GPU sleep queued to hide the host's launch path, CUDA
events). Before every round but the first the inputs are freed and re-allocated behind a random-size
pad (another physical placement in the same process). The child prints each round's median.

Conditions, each ``--procs`` children in a row (nothing else launches a kernel meanwhile):

* ``quiet``: nothing else on the GPU;
* ``held``: six idle processes each hold ~4 GB allocated in random-size pieces (the device's memory
  taken and fragmented as under a loaded grader, no kernels);
* ``churn``: the same six processes free and re-allocate their pieces every ~50 ms (the physical
  memory map keeps changing; still no kernels).

Read: *within* a process (rounds) vs *between* processes (their first round). If between is wide and
within is tight, the time is a property of the process (its context, its placement) and the grader
can only average it away by timing a candidate in more than one process.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]

HOG = """
import random, sys, time, torch
rng = random.Random(int(sys.argv[1])); churn = sys.argv[2] == "1"
def take():
    out, left = [], 4 << 30
    while left > 0:
        n = min(left, rng.randrange(1, 128) << 20); out.append(torch.empty(n, dtype=torch.uint8, device="cuda")); left -= n
    return out
held = take(); print("ready", flush=True)
while True:
    time.sleep(0.05)
    if churn:
        for i in rng.sample(range(len(held)), len(held) // 2):
            held[i] = None
        torch.cuda.empty_cache()
        held = [h for h in held if h is not None] + take()[: len(held) // 2]
"""


def child(args: argparse.Namespace) -> None:
    import random

    import torch
    from placement_probe import load  # (this directory: run as a script)

    suite = Path(args.suite)
    tmod, smod = load(suite / "tasks" / f"{args.task}.py"), load(suite / "solutions" / f"{args.task}.py")
    dev = torch.device("cuda")
    model = smod.ModelNew(*tmod.get_init_inputs()).to(dev)
    torch.manual_seed(0)
    host = tmod.get_inputs()
    flush = torch.empty(256 << 20 >> 2, device=dev)
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    rng = random.Random(args.seed)
    pads = []
    xs = [x.to(dev) for x in host]
    rounds = []
    with torch.no_grad():
        for _ in range(5):
            model(*xs)
        for r in range(args.rounds):
            if r:
                del xs
                pads.append(torch.empty(rng.randrange(1, 64) << 21, dtype=torch.uint8, device=dev))
                xs = [x.to(dev) for x in host]
            ts = []
            for _ in range(args.calls):
                torch.cuda.synchronize()
                flush.zero_()
                torch.cuda._sleep(2_000_000)  # ~1 ms of GPU time: the launch path is hidden
                s.record()
                model(*xs)
                e.record()
                torch.cuda.synchronize()
                ts.append(s.elapsed_time(e))
            ts.sort()
            rounds.append({"median": statistics.median(ts), "p25": ts[len(ts) // 4], "min": ts[0]})
    print("RESULT " + json.dumps(rounds), flush=True)


def spread(xs: list[float]) -> float:
    return max(xs) / min(xs) - 1


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--suite", default=str(ROOT / "envs" / "single_ops"))
    ap.add_argument("--task", default="18_matmul_square")
    ap.add_argument("--procs", type=int, default=12)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--calls", type=int, default=50)
    ap.add_argument("--conditions", default="quiet,held,churn")
    ap.add_argument("--child", action="store_true")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    if args.child:
        child(args)
        return 0
    out = {}
    for cond in args.conditions.split(","):
        hogs = []
        if cond != "quiet":
            hogs = [subprocess.Popen([sys.executable, "-c", HOG, str(i), "1" if cond == "churn" else "0"],
                                     stdout=subprocess.PIPE, text=True) for i in range(6)]
            for h in hogs:
                h.stdout.readline()
        per = []
        try:
            for p in range(args.procs):
                res = subprocess.run([sys.executable, __file__, "--child", "--task", args.task, "--suite", args.suite,
                                      "--rounds", str(args.rounds), "--calls", str(args.calls), "--seed", str(p)],
                                     capture_output=True, text=True, timeout=300)
                line = next((ln for ln in res.stdout.splitlines() if ln.startswith("RESULT ")), None)
                if line is None:
                    print(res.stderr[-2000:], file=sys.stderr)
                    continue
                per.append(json.loads(line[7:]))
        finally:
            for h in hogs:
                h.kill()
        first = [r[0]["median"] for r in per]
        within = [spread([x["median"] for x in r]) for r in per]
        row = {"first_round_medians": first, "between_processes": spread(first),
               "within_process": within, "within_median": statistics.median(within),
               "process_means": [statistics.mean(x["median"] for x in r) for r in per],
               "rounds": per}
        row["between_process_means"] = spread(row["process_means"])
        out[cond] = row
        print(f"{cond:<6} {len(per)} processes: first-round medians {min(first):.4f}-{max(first):.4f} ms, between "
              f"{100 * row['between_processes']:.2f}% (process means {100 * row['between_process_means']:.2f}%); "
              f"within a process median {100 * row['within_median']:.2f}% max {100 * max(within):.2f}%", flush=True)
    if args.out:
        Path(args.out).write_text(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
