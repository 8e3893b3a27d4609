"""Grader throughput: warm LocalGrader vs a fresh process per evaluation, side by side.

    python tests/benchmarks/bench_grader.py                      # CPU smoke (3 tasks, light protocol)
    python tests/benchmarks/bench_grader.py --device cuda        # one GPU, all single_ops, full protocol
    python tests/benchmarks/bench_grader.py --device cuda --tasks '0*' --repeat 10 --json out.json

Runs the ``envs/single_ops`` reference solutions (the suite's protocol: correctness trials,
timing, profiling) three ways, in one process and with the same Triton cache state:

1. ``warm-up``: one pass that fills the Triton cache (not counted; correctness only, graded
   concurrently so that the kernels compile in parallel);
2. ``fresh``: ``evaluate()`` per solution, each in a newly exec'd process (the old path: no warm
   spares, no zygote);
3. ``warm``: a :class:`LocalGrader` (spare processes started ahead, references cached) grading
   the same solutions ``--concurrency`` at a time, ``--warm-rounds`` times (new seeds each round:
   a longer run measures the steady state rather than one burst and its tail).

Prints evaluations/minute of both and the ratio, p50/p99 latency (warm), the mean seconds per
stage (process start, references, load/compile, correctness, transfers, timing, profiling, ...),
and the timing spread of one kernel over ``--repeat`` evaluations (speedup max/min - 1).
Writes everything as JSON with ``--json``.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import statistics
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
if importlib.util.find_spec("drkernel") is None:  # (PYTHONPATH may name another checkout's package: A/B runs)
    sys.path.insert(0, str(ROOT))


def _grader_module(path: str, older: str) -> object:
    """A grader module by its path in this checkout, or by ``older``, its path in a checkout from
    before the grader's modules moved into rooms (A/B runs import an older package)."""
    try:
        return importlib.import_module(path)
    except ImportError:
        return importlib.import_module(older)


def _pct(xs: list[float], q: float) -> float:
    s = sorted(xs)
    k = (len(s) - 1) * q
    lo, hi = int(k), min(int(k) + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (k - lo)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--suite", default=str(ROOT / "envs" / "single_ops"))
    ap.add_argument("--tasks", default=None, help="task filter (default: 3 tasks on cpu, all on cuda)")
    ap.add_argument("--concurrency", type=int, default=None, help="warm grader capacity (default: its own)")
    ap.add_argument("--repeat", type=int, default=None, help="evaluations of one kernel for the spread "
                    "(default 10 on cuda, 3 on cpu)")
    ap.add_argument("--spread-task", default=None, help="task id for the spread (default: the first task)")
    ap.add_argument("--warm-rounds", type=int, default=1, help="passes over the solutions in the warm arm")
    ap.add_argument("--skip-fresh", action="store_true")
    ap.add_argument("--skip-warmup", action="store_true", help="no Triton-cache warm-up pass (cache already warm)")
    ap.add_argument("--capacities", default=None,
                    help="e.g. 1,4,8: instead of the arms above, grade every solution --sweep-rounds times with a "
                         "warm LocalGrader of each capacity and report evaluations/min and each kernel's timing "
                         "spread (max/min - 1 of its time over the rounds) side by side")
    ap.add_argument("--sweep-rounds", type=int, default=3)
    ap.add_argument("--spares", type=int, default=None, help="warm spare processes per device (default: the grader's)")
    ap.add_argument("--precompile-timeout", type=float, default=None,
                    help="EvalConfig.precompile_timeout_s (default: the suite's; 0: no compiling ahead)")
    ap.add_argument("--switch-interval", type=float, default=None,
                    help="sys.setswitchinterval for this process (seconds; Python's default is 0.005)")
    ap.add_argument("--grader-cache-share", type=float, default=None,
                    help="drkernel.env.device.GRADER_CACHE_SHARE for this run (the grader empties its CUDA "
                         "cache when its idle part is above this share of the device)")
    ap.add_argument("--launch-budget-ms", type=float, default=None,
                    help="EvalConfig.launch_budget_ms (the hold before every call; default: the suite's)")
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)
    if args.switch_interval is not None:
        sys.setswitchinterval(args.switch_interval)

    from drkernel.env import LocalGrader, evaluate, load_suite
    if args.grader_cache_share is not None:
        _grader_module("drkernel.env.device", "drkernel.env.evaluation").GRADER_CACHE_SHARE = args.grader_cache_share
    _count_empty_cache()

    cuda = args.device.startswith("cuda")
    suite = load_suite(args.suite)
    selected = suite.select(args.tasks or (None if cuda else "01*,07*,13*"))
    config = suite.eval_config(device=args.device)
    if args.precompile_timeout is not None:
        config = config.with_overrides(precompile_timeout_s=args.precompile_timeout)
    if args.launch_budget_ms is not None:
        config = config.with_overrides(launch_budget_ms=args.launch_budget_ms)
    jobs = [(st.id, st.task(suite.entry_point), st.solution.read_text()) for st in selected if st.solution]
    repeat = args.repeat or (10 if cuda else 3)
    import drkernel

    print(f"drkernel from {Path(drkernel.__file__).parent}", flush=True)
    print(f"{len(jobs)} solutions of {suite.id} on {args.device}; protocol: {config.trials_per_distribution} "
          f"trials x {len(config.distributions)} distributions, {config.timing_trials} timed calls, "
          f"profile={config.profile}", flush=True)
    out: dict = {"device": args.device, "suite": suite.id, "tasks": [j[0] for j in jobs], "config": {
        "timing_trials": config.timing_trials, "warmup": config.warmup,
        "trials_per_distribution": config.trials_per_distribution, "precompile_timeout_s": config.precompile_timeout_s,
        "switch_interval_s": sys.getswitchinterval(), "launch_budget_ms": config.launch_budget_ms}}

    def show(arm: str, tid: str, r) -> None:
        st = r.details.get("stage_seconds", {})
        parts = " ".join(f"{k}={v:.2f}" for k, v in sorted(st.items(), key=lambda kv: -kv[1]) if v >= 0.01)
        print(f"  [{arm}] {tid:<24} {'PASS' if r.passed else 'FAIL'} {r.details.get('eval_seconds', 0):6.2f}s  {parts}",
              flush=True)

    if args.capacities:
        out["sweep"] = capacity_sweep(jobs, config, [int(c) for c in args.capacities.split(",")], args.sweep_rounds,
                                      show, spares=args.spares)
        if args.json:
            Path(args.json).write_text(json.dumps(out, indent=2))
            print(f"wrote {args.json}")
        return 0

    def run_fresh(arm: str) -> tuple[float, list]:
        # the old path: each evaluation exec's its worker (python -m drkernel.env.process.worker), no zygote
        os.environ["DRKERNEL_WORKER_START"] = "exec"  # nothing else runs in this process meanwhile
        try:
            t0 = time.monotonic()
            rs = []
            for i, (tid, task, src) in enumerate(jobs):
                rs.append(evaluate(task, src, seed=i, config=config))
                show(arm, tid, rs[-1])
            return time.monotonic() - t0, rs
        finally:
            del os.environ["DRKERNEL_WORKER_START"]

    # 1. warm-up: Triton cache filled for both arms (kernels compile in parallel)
    if not args.skip_warmup:
        t0 = time.monotonic()
        with LocalGrader(config, capacity=args.concurrency) as g, ThreadPoolExecutor(max_workers=g.capacity) as pool:
            warm_rs = list(pool.map(lambda j: g.grade(j[1], j[2], seed=0, options={"measure_performance": False}),
                                    jobs))
        out["warmup_s"] = time.monotonic() - t0
        bad = [j[0] for j, r in zip(jobs, warm_rs) if not r.passed]
        print(f"warm-up pass: {out['warmup_s']:.1f}s; not passing: {bad or 'none'}", flush=True)

    # 2. fresh process per evaluation
    if not args.skip_fresh:
        fresh_s, fresh_rs = run_fresh("fresh")
        out["fresh"] = {"seconds": fresh_s, "evals_per_min": 60 * len(jobs) / fresh_s,
                        "latency_s": [r.details["eval_seconds"] for r in fresh_rs]}

    # 3. warm LocalGrader
    grader = LocalGrader(config, capacity=args.concurrency)
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and grader.pool.ready_count(grader.devices[0]) < grader.pool.spares:
            time.sleep(0.2)  # let the spares start, as in a long-lived grader
        lat: list[float] = []

        def one(k: int):
            i = k % len(jobs)
            _, task, src = jobs[i]
            t = time.monotonic()
            r = grader.grade(task, src, seed=k)
            lat.append(time.monotonic() - t)
            show("warm", jobs[i][0], r)
            return r

        n_warm = len(jobs) * max(1, args.warm_rounds)
        t0 = time.monotonic()
        with ThreadPoolExecutor(max_workers=grader.capacity) as pool:
            warm_rs = list(pool.map(one, range(n_warm)))
        warm_s = time.monotonic() - t0
        stages: dict[str, list[float]] = {}
        for r in warm_rs:
            for k, v in r.details.get("stage_seconds", {}).items():
                stages.setdefault(k, []).append(v)
        out["warm"] = {"seconds": warm_s, "evals": n_warm, "evals_per_min": 60 * n_warm / warm_s,
                       "capacity": grader.capacity,
                       "latency_p50_s": _pct(lat, 0.5), "latency_p99_s": _pct(lat, 0.99),
                       "warm_processes": sum(bool(r.details.get("warm_process")) for r in warm_rs),
                       "passed": sum(r.passed for r in warm_rs),
                       "stage_mean_s": {k: sum(v) / n_warm for k, v in stages.items()}}
        # 4. timing spread of one kernel over repeated evaluations (sequential: no timing overlap)
        spread_id = args.spread_task or jobs[0][0]
        _, task, src = next(j for j in jobs if j[0] == spread_id)
        speedups = []
        for i in range(repeat):
            r = grader.grade(task, src, seed=1000 + i)
            show("spread", spread_id, r)
            if r.speedup:
                speedups.append(r.speedup)
        out["spread"] = {"task": spread_id, "speedups": speedups,
                         "max_over_min_minus_1": (max(speedups) / min(speedups) - 1) if speedups else None,
                         "cv": (statistics.pstdev(speedups) / statistics.mean(speedups)) if len(speedups) > 1 else None}
    finally:
        grader.close()

    # report
    w = out["warm"]
    print(f"\n{'arm':<8} {'evals':>5} {'seconds':>8} {'evals/min':>10}")
    if "fresh" in out:
        f = out["fresh"]
        print(f"{'fresh':<8} {len(jobs):>5} {f['seconds']:>8.1f} {f['evals_per_min']:>10.1f}")
    print(f"{'warm':<8} {w['evals']:>5} {w['seconds']:>8.1f} {w['evals_per_min']:>10.1f}   (capacity {w['capacity']}, "
          f"{w['warm_processes']}/{w['evals']} warm processes, {w['passed']} passed)")
    if "fresh" in out:
        out["speedup_warm_over_fresh"] = w["evals_per_min"] / out["fresh"]["evals_per_min"]
        print(f"warm / fresh: {out['speedup_warm_over_fresh']:.2f}x")
    print(f"warm latency p50 {w['latency_p50_s']:.2f}s  p99 {w['latency_p99_s']:.2f}s")
    print("\nmean seconds per evaluation, by stage (warm):")
    for k, v in sorted(w["stage_mean_s"].items(), key=lambda kv: -kv[1]):
        print(f"  {k:<14} {v:8.3f}")
    s = out["spread"]
    if s["speedups"]:
        print(f"\ntiming spread of {s['task']} over {len(s['speedups'])} evaluations: speedup "
              f"{min(s['speedups']):.3f}x-{max(s['speedups']):.3f}x, max/min-1 = {100 * s['max_over_min_minus_1']:.1f}%"
              + (f", cv {100 * s['cv']:.1f}%" if s["cv"] is not None else ""))
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=2))
        print(f"wrote {args.json}")
    return 0


def _add_mean(into: dict[str, float], values: dict[str, float], n: int) -> None:
    """Add each value's share of a mean over ``n`` evaluations."""
    for k, v in values.items():
        into[k] = into.get(k, 0.0) + v / n


def _mean_phases(precompiled: list[dict]) -> dict[str, float]:
    """Mean of the compilers' own phase timers (drkernel.env.process.precompile; diagnostics)."""
    out: dict[str, float] = {}
    for p in precompiled:
        _add_mean(out, p.get("phases_s") or {}, len(precompiled))
    return {k: round(v, 4) for k, v in out.items()}


EMPTY_CACHE = {"calls": 0, "seconds": 0.0}
"""The grader's ``torch.cuda.empty_cache`` calls in this process (it frees with ``cudaFree``, which
waits for the device and holds the caching allocator meanwhile)."""


def _count_empty_cache() -> None:
    import torch

    real = torch.cuda.empty_cache

    def counted() -> None:
        t0 = time.monotonic()
        try:
            real()
        finally:
            EMPTY_CACHE["calls"] += 1
            EMPTY_CACHE["seconds"] += time.monotonic() - t0

    torch.cuda.empty_cache = counted


def _occupancy(device: str) -> dict[str, float] | None:
    gate = _grader_module("drkernel.env.measure.gate", "drkernel.env.evaluation").device_gate(device)
    return gate.occupancy() if gate is not None and hasattr(gate, "occupancy") else None  # (older gates: none)


def _occupancy_share(before: dict | None, after: dict | None) -> dict[str, float] | None:
    """The gate's states (:data:`drkernel.env.measure.gate.STATES`) as shares of the interval, and the mean
    number of shared holders while shared work ran (``shared`` and ``drain``)."""
    if not before or not after:
        return None
    d = {k: after[k] - before[k] for k in after}
    STATES = _grader_module("drkernel.env.measure.gate", "drkernel.env.gate").STATES

    wall = sum(d[k] for k in STATES)
    busy = d["shared"] + d["drain"]
    return {**{k: d[k] / wall for k in STATES},
            "mean_shared_holders": d["shared_holders_s"] / busy if busy > 0 else 0.0} if wall > 0 else None


def capacity_sweep(jobs: list, config, capacities: list[int], rounds: int, show, spares: int | None = None) -> list[dict]:
    """Evaluations/min and per-kernel timing spread under load, for each grader capacity.

    Each capacity gets its own warm LocalGrader (spares ready before the clock starts, the
    reference timings measured in a first, uncounted pass), then grades every solution ``rounds``
    times with ``capacity`` evaluations in flight. A kernel's spread is max/min - 1 of its median
    time over the rounds (the reference is cached, so the speedup moves exactly as much)."""
    from drkernel.env.grader import LocalGrader

    rows = []
    for cap in capacities:
        with LocalGrader(config, capacity=cap, spares=spares) as g:
            deadline = time.monotonic() + 180
            while time.monotonic() < deadline and g.pool.ready_count(g.devices[0]) < g.pool.spares:
                time.sleep(0.2)
            with ThreadPoolExecutor(max_workers=cap) as pool:  # reference timings (cached afterwards)
                list(pool.map(lambda j: g.grade(j[1], j[2], seed=7), jobs))
            while time.monotonic() < deadline + 60 and g.pool.ready_count(g.devices[0]) < g.pool.spares:
                time.sleep(0.2)
            times: dict[str, list[float]] = {j[0]: [] for j in jobs}
            stages: dict[str, float] = {}
            clocks: dict[str, list] = {}
            held: dict[str, list] = {}  # per evaluation: the SM clock measured by the holds (budget.py)
            unheld: list[dict] = []
            phases: dict[str, float] = {}
            parts: dict[str, dict[str, float]] = {}  # worker's load / run / first-run parts
            gate: dict[str, float] = {}
            precompiled: list[dict] = []
            quartiles: dict[str, list[list[float | None]]] = {}  # per evaluation: its timed calls' min..max
            kernels: dict[str, list[dict[str, float]]] = {}  # per evaluation: its top kernels' mean us per call
            launches: dict[str, list[list[float | None]]] = {}  # per evaluation: host ms of its timed forwards
            passed = 0

            def one(k: int):
                tid, task, src = jobs[k % len(jobs)]
                r = g.grade(task, src, seed=100 + k)
                show(f"cap {cap}", tid, r)
                return tid, r

            g.pool.starts.clear()
            occ0 = _occupancy(g.devices[0])
            emptied0 = dict(EMPTY_CACHE)
            t0 = time.monotonic()
            with ThreadPoolExecutor(max_workers=cap) as pool:
                for tid, r in pool.map(one, range(len(jobs) * rounds)):
                    passed += r.passed
                    n = len(jobs) * rounds
                    _add_mean(stages, r.details.get("stage_seconds", {}), n)
                    _add_mean(phases, r.details.get("timing", {}).get("worker_phases_s", {}), n)
                    for req, d in r.details.get("worker_parts_s", {}).items():
                        _add_mean(parts.setdefault(req, {}), d, n)
                    _add_mean(gate, r.details.get("gpu_gate", {}), n)
                    pre = r.details.get("precompile")
                    if pre:
                        precompiled.append(pre)
                    if r.kernel_ms:
                        times[tid].append(r.kernel_ms)
                        c = r.details.get("timing", {}).get("candidate_ms", {})
                        quartiles.setdefault(tid, []).append([c.get(q) for q in ("min", "p25", "median", "p75", "max")])
                        launch = r.details.get("timing", {}).get("launch_ms", {})
                        launches.setdefault(tid, []).append([launch.get(q) for q in ("median", "p75", "max")])
                        top = r.details.get("profile", {}).get("top") or []
                        kernels.setdefault(tid, []).append({t["name"][:60]: round(t["us"], 2) for t in top[:4]})
                        clocks.setdefault(tid, []).append(r.details.get("timing", {}).get("sm_clock"))
                        lb = r.details.get("timing", {}).get("launch_budget") or {}
                        held.setdefault(tid, []).append(lb.get("sm_clock_mhz"))
                        if not lb.get("verified", True):  # timed without the hold: the reason and the probe
                            unheld.append({"task": tid, "reason": lb.get("reason"), "probe_gap_ms": lb.get("probe_gap_ms"),
                                           "regs_per_thread": lb.get("regs_per_thread")})
            secs = time.monotonic() - t0
            occ1 = _occupancy(g.devices[0])
            emptied = {k: EMPTY_CACHE[k] - emptied0[k] for k in EMPTY_CACHE}
            starts = list(g.pool.starts)
            pool_spares = g.pool.spares
        start_mean = {k: sum(st.get(k, 0.0) for st in starts) / len(starts) for k in starts[0]} if starts else {}
        spreads = {t: (max(v) / min(v) - 1) for t, v in times.items() if len(v) >= 2}
        worst = max(spreads.items(), key=lambda kv: kv[1]) if spreads else (None, None)
        row = {"capacity": cap, "evals": len(jobs) * rounds, "seconds": secs,
               "evals_per_min": 60 * len(jobs) * rounds / secs, "passed": passed,
               "spread_median": statistics.median(spreads.values()) if spreads else None,
               "spread_max": worst[1], "spread_worst_task": worst[0], "spread_by_task": spreads,
               "times_ms": times, "call_quartiles_ms": quartiles, "top_kernels_us": kernels, "launch_ms": launches, "stage_mean_s": stages, "worker_phase_mean_s": phases,
               "worker_parts_mean_s": parts, "gpu_gate_mean": gate,
               "precompile": {"evaluations": len(precompiled), "finished": sum(bool(p.get("finished")) for p in precompiled),
                              "complete": sum(bool(p.get("complete")) for p in precompiled),
                              "mean_s": statistics.mean(p.get("seconds", 0.0) for p in precompiled) if precompiled else None,
                              "reasons": sorted({str(p.get("reason")) for p in precompiled if p.get("reason")})[:5],
                              "own_phases_mean_s": _mean_phases(precompiled)},
               "gate_occupancy": _occupancy_share(occ0, occ1), "empty_cache": emptied,
               "sm_clock": clocks, "hold_clock_mhz": held, "timed_without_hold": unheld, "spares": pool_spares, "worker_starts": len(starts), "worker_start_mean_s": start_mean}
        rows.append(row)
        print(f"capacity {cap}: {row['evals_per_min']:.1f} evaluations/min, {passed}/{row['evals']} passed, "
              f"spread median {100 * (row['spread_median'] or 0):.2f}% max {100 * (row['spread_max'] or 0):.2f}% "
              f"({row['spread_worst_task']}), {len(unheld)} timed without the launch budget's hold", flush=True)
        print("  mean s per evaluation: " + " ".join(f"{k}={v:.3f}" for k, v in sorted(stages.items(), key=lambda kv: -kv[1])))
        print("  worker's timing request: " + " ".join(f"{k}={v:.3f}" for k, v in phases.items()), flush=True)
        for req, d in parts.items():
            print(f"  worker's {req} requests: " + " ".join(f"{k}={v:.3f}" for k, v in d.items()), flush=True)
        print("  GPU gate per evaluation: " + " ".join(f"{k}={v:.3f}" for k, v in gate.items()), flush=True)
        if row["gate_occupancy"]:
            print("  GPU gate, share of the wall time: " + " ".join(
                f"{k}={v:.3f}" for k, v in row["gate_occupancy"].items()), flush=True)
        print(f"  grader's empty_cache: {emptied['calls']} calls, {emptied['seconds']:.2f} s", flush=True)
        print(f"  compiled ahead: {row['precompile']}", flush=True)
        print(f"  worker starts ({len(starts)}, {pool_spares} spares): " + " ".join(f"{k}={v:.2f}" for k, v in start_mean.items()),
              flush=True)
    print(f"\n{'capacity':>8} {'evals/min':>10} {'spread median':>14} {'spread max':>11}  worst kernel")
    for r in rows:
        print(f"{r['capacity']:>8} {r['evals_per_min']:>10.1f} {100 * (r['spread_median'] or 0):>13.2f}% "
              f"{100 * (r['spread_max'] or 0):>10.2f}%  {r['spread_worst_task']}")
    return rows


if __name__ == "__main__":
    sys.exit(main())
