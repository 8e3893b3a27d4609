"""Benchmark: TRLOO on 1,000,000 (trajectory, turn) cells on one CPU thread.

    python tests/benchmarks/bench_trloo.py [--out bench_trloo.json]

Builds N = 250,000 trajectories x T = 4 turns in groups of 16 with random turn masks, then times
``trloo_advantages`` (median over several runs after warm-up) with three kinds of group ids:
an int64 tensor, a Python list of ints, and a list of uid strings like Dr. Kernel's
``batch_<step>_example_<uuid>``. Prints a table; ``--out`` also writes the numbers as JSON.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # run from a checkout

from drkernel.advantages.trloo import trloo_advantages  # noqa: E402


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--trajectories", type=int, default=250_000, help="N")
    parser.add_argument("--turns", type=int, default=4, help="T")
    parser.add_argument("--group-size", type=int, default=16, help="samples per prompt")
    parser.add_argument("--keep-prob", type=float, default=0.8, help="P(turn_mask is True)")
    parser.add_argument("--warmup", type=int, default=2, help="untimed runs first")
    parser.add_argument("--repeats", type=int, default=7, help="timed runs (median reported)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=None, help="write results as JSON here")
    return parser.parse_args()


def time_call(fn, warmup: int, repeats: int) -> list[float]:  # noqa: ANN001
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return times


def main() -> None:
    args = parse_args()
    torch.set_num_threads(1)
    gen = torch.Generator().manual_seed(args.seed)
    n, num_turns = args.trajectories, args.turns
    turn_rewards = torch.rand(n, num_turns, generator=gen) * 2.5  # rewards in [0, 2.5), like the recipe
    turn_mask = torch.rand(n, num_turns, generator=gen) < args.keep_prob
    order = torch.randperm(n, generator=gen)  # groups interleaved, not contiguous
    group_tensor = (torch.arange(n) // args.group_size)[order]
    group_ints = group_tensor.tolist()
    group_strs = [f"batch_0_example_{g:012x}" for g in group_ints]

    variants = {
        "int64 tensor ids": group_tensor,
        "list[int] ids": group_ints,
        "list[str] ids": group_strs,
    }
    rows = []
    for label, ids in variants.items():
        times = time_call(
            lambda ids=ids: trloo_advantages(turn_rewards, ids, turn_mask), args.warmup, args.repeats
        )
        rows.append(
            {
                "variant": label,
                "median_s": statistics.median(times),
                "min_s": min(times),
                "max_s": max(times),
                "cells_per_s": n * num_turns / statistics.median(times),
            }
        )

    print(
        f"TRLOO, N={n:,} x T={num_turns} = {n * num_turns:,} cells, groups of {args.group_size}, "
        f"keep {args.keep_prob}, torch {torch.__version__}, 1 thread, median of {args.repeats}"
    )
    print(f"{'group ids':<18} {'median ms':>10} {'min ms':>8} {'max ms':>8} {'Mcells/s':>9}")
    for row in rows:
        print(
            f"{row['variant']:<18} {row['median_s'] * 1e3:>10.1f} {row['min_s'] * 1e3:>8.1f} "
            f"{row['max_s'] * 1e3:>8.1f} {row['cells_per_s'] / 1e6:>9.1f}"
        )
    if args.out is not None:
        result = {
            "benchmark": "trloo_advantages",
            "trajectories": n,
            "turns": num_turns,
            "cells": n * num_turns,
            "group_size": args.group_size,
            "keep_prob": args.keep_prob,
            "warmup": args.warmup,
            "repeats": args.repeats,
            "threads": 1,
            "torch": torch.__version__,
            "python": platform.python_version(),
            "machine": platform.machine(),
            "results": rows,
        }
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, indent=2) + "\n")
        print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
