"""Is the timing spread between evaluations a memory-placement effect? One process, three experiments.

    python tests/benchmarks/diagnostics/placement_probe.py [--task 18_matmul_square] [--rounds 10] [--calls 50]

Each round times the suite's reference and solution interleaved (``--calls`` pairs, the grader's
flush-then-events protocol) and reports the speedup of medians.

* ``same``: the same input buffers every round (what one evaluation sees; rounds differ only in time);
* ``moved``: before each round the buffers are freed and re-allocated behind a random-size pad
  (what separate processes see: each evaluation lands its buffers somewhere else);
* ``sleep``: as ``same``, with ~0.5 ms of GPU sleep queued before each timed call (the host's launch
  path hidden: is the spread host-side launch jitter?);
* ``nogc``: as ``same``, with Python's garbage collector off during each round;
* ``jitter``: as ``moved``, but a random-size pad is taken before *every call*, so every round
  averages over many placements.

If ``same`` is tight and ``moved`` is wide, placement explains the spread between processes, and
``jitter`` shows whether averaging placements inside one evaluation removes it.
"""

from __future__ import annotations

import argparse
import gc
import time
import importlib.util
import json
import random
import statistics
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[3]


def load(path: Path):
    spec = importlib.util.spec_from_file_location(path.stem.replace("-", "_") + "_mod", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--suite", default=str(ROOT / "envs" / "single_ops"))
    ap.add_argument("--task", default="18_matmul_square")
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--calls", type=int, default=50)
    ap.add_argument("--out", default=None)
    ap.add_argument("--hold", action="store_true",
                    help="queue the GPU sleep before every timed call in every experiment (the grader's protocol "
                         "since the launch budget) and report the candidate's own medians too")
    ap.add_argument("--experiments", default="same,moved,jitter,sleep,nogc,same_again")
    args = ap.parse_args()
    suite = Path(args.suite)
    tmod, smod = load(suite / "tasks" / f"{args.task}.py"), load(suite / "solutions" / f"{args.task}.py")
    dev = torch.device("cuda")
    ref, cand = tmod.Model(*tmod.get_init_inputs()).to(dev), smod.ModelNew(*tmod.get_init_inputs()).to(dev)
    torch.manual_seed(0)
    host_inputs = [x for x in tmod.get_inputs()]
    flush = torch.empty(256 << 20 >> 2, device=dev)
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    rng = random.Random(0)

    def place() -> tuple[torch.Tensor, list[torch.Tensor]]:
        pad = torch.empty(rng.randrange(0, 64) << 21, dtype=torch.uint8, device=dev)
        return pad, [x.to(dev) for x in host_inputs]

    launch: dict[str, list[float]] = {"ref": [], "cand": []}

    def one(model, xs, sleep: bool = False) -> float:
        torch.cuda.synchronize()
        flush.zero_()
        if sleep:
            torch.cuda._sleep(1_000_000)  # ~0.5 ms of GPU time: the host's launch path is hidden
        start.record()
        t0 = time.perf_counter()
        model(*xs)
        launch["ref" if model is ref else "cand"].append(time.perf_counter() - t0)
        end.record()
        torch.cuda.synchronize()
        return start.elapsed_time(end)

    cand_medians: list[float] = []

    def round_(xs, jitter: bool, sleep: bool = False) -> float:
        r, c = [], []
        sleep = sleep or args.hold
        for i in range(args.calls):
            pad = None
            if jitter:
                pad, xs = place()
            for who in (("r", "c") if i % 2 == 0 else ("c", "r")):
                (r if who == "r" else c).append(one(ref if who == "r" else cand, xs, sleep))
            del pad
        cand_medians.append(statistics.median(c))
        return statistics.median(r) / statistics.median(c)

    with torch.no_grad():
        _, xs = place()
        for _ in range(5):
            one(ref, xs), one(cand, xs)
        out = {}
        for exp in args.experiments.split(","):
            sp = []
            cand_medians.clear()
            keep = []
            for _ in range(args.rounds):
                if exp in ("moved", "jitter"):
                    keep.append(torch.empty(rng.randrange(1, 64) << 21, dtype=torch.uint8, device=dev))
                    _, xs = place()
                launch["ref"].clear(), launch["cand"].clear()
                if exp == "nogc":
                    gc.collect()
                    gc.disable()
                sp.append(round_(xs, exp == "jitter", exp == "sleep"))
                gc.enable()
            del keep
            out[exp] = {"speedups": sp, "max_over_min_minus_1": max(sp) / min(sp) - 1,
                        "cv": statistics.pstdev(sp) / statistics.mean(sp),
                        "cand_medians_ms": list(cand_medians),
                        "cand_max_over_min_minus_1": max(cand_medians) / min(cand_medians) - 1}
            out[exp]["launch_ms"] = {k: statistics.median(v) * 1e3 for k, v in launch.items()}
            print(f"launch ms (last round) ref {out[exp]['launch_ms']['ref']:.3f} cand {out[exp]['launch_ms']['cand']:.3f}  ",
                  end="")
            print(f"{exp:<7} speedup {min(sp):.4f}-{max(sp):.4f}  max/min-1 {out[exp]['max_over_min_minus_1']:.4f}  "
                  f"cv {out[exp]['cv']:.4f}  candidate medians max/min-1 {out[exp]['cand_max_over_min_minus_1']:.4f}", flush=True)
    if args.out:
        Path(args.out).write_text(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
