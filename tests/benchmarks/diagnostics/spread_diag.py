"""Where does the timing spread between evaluations come from? One kernel, graded repeatedly, several ways.

    python tests/benchmarks/diagnostics/spread_diag.py [--task 18_matmul_square] [--repeat 10] [--out spread_diag.json]

Arms (each ``--repeat`` sequential evaluations of the suite's solution, fresh seeds):

* ``warm``: LocalGrader as a user runs it: a replacement spare starts while the next evaluation runs;
* ``warm_quiet``: the same grader, but each evaluation starts only once every spare is ready
  (nothing else of ours touches the GPU during it);
* ``fresh``: a newly started process per evaluation, nothing running beside it;
* ``warm_quiet_long``: as ``warm_quiet`` with 4x the timed calls.

Per evaluation it records the reported speedup, the medians, the median of the per-pair ratios
(reference call / adjacent candidate call) and the GPU's SM clock, power and temperature before it.
Per arm: speedup max/min - 1 and the coefficient of variation, for the reported and the paired statistic.
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
sys.path.insert(0, str(ROOT))


def gpu_state() -> dict:
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=clocks.sm,clocks.mem,power.draw,temperature.gpu,"
                              "clocks_throttle_reasons.active", "--format=csv,noheader,nounits"],
                             capture_output=True, text=True, timeout=10).stdout.strip().split(", ")
        return {"sm_mhz": out[0], "mem_mhz": out[1], "power_w": out[2], "temp_c": out[3], "throttle": out[4]}
    except Exception as exc:  # noqa: BLE001 - diagnostics only
        return {"error": str(exc)}


def spread(xs: list[float]) -> dict:
    if not xs:
        return {}
    return {"min": min(xs), "max": max(xs), "max_over_min_minus_1": max(xs) / min(xs) - 1,
            "cv": statistics.pstdev(xs) / statistics.mean(xs)}


def row_of(r) -> dict:
    t = r.details.get("timing", {})
    s = t.get("samples", {})
    ref, cand = s.get("reference", []), s.get("candidate", [])
    pairs = [a / b for a, b in zip(ref, cand) if b > 0]
    return {"passed": r.passed, "speedup": r.speedup, "ref_ms": r.reference_ms, "cand_ms": r.kernel_ms,
            "paired": statistics.median(pairs) if pairs else None,
            "ref_iqr": [t.get("reference_ms", {}).get("p25"), t.get("reference_ms", {}).get("p75")],
            "cand_iqr": [t.get("candidate_ms", {}).get("p25"), t.get("candidate_ms", {}).get("p75")],
            "warm": r.details.get("warm_process"), "error": r.error.message[:200] if r.error else None}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--suite", default=str(ROOT / "envs" / "single_ops"))
    ap.add_argument("--task", default="18_matmul_square")
    ap.add_argument("--repeat", type=int, default=10)
    ap.add_argument("--arms", default="warm,warm_quiet,fresh,warm_quiet_long")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--out", default=None)
    args = ap.parse_args()

    from drkernel.env.evaluation import evaluate
    from drkernel.env.grader import LocalGrader
    from drkernel.env.tasks.suite import load_suite

    suite = load_suite(args.suite)
    st = next(s for s in suite.select(args.task))
    task, src = st.task(suite.entry_point), st.solution.read_text()
    config = suite.eval_config(device=args.device)
    print(f"{st.id}: timing_trials={config.timing_trials} warmup={config.warmup}", flush=True)
    r = evaluate(task, src, seed=0, config=config)  # Triton cache warm for every arm
    print(f"warm-up: passed={r.passed} speedup={r.speedup}", flush=True)
    results: dict = {"task": st.id, "arms": {}}
    grader = LocalGrader(config)
    dev = grader.devices[0]

    def wait_spares() -> None:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and grader.pool.ready_count(dev) < grader.pool.spares:
            time.sleep(0.1)

    try:
        for arm in args.arms.split(","):
            rows = []
            wait_spares()
            for i in range(args.repeat):
                if arm.startswith("warm_quiet"):
                    wait_spares()
                    time.sleep(1.0)
                state = gpu_state()
                seed = 1000 + i
                if arm == "fresh":
                    res = evaluate(task, src, seed=seed, config=config)
                elif arm == "warm_quiet_long":
                    res = grader.grade(task, src, seed=seed, options={"timing_trials": 4 * config.timing_trials})
                else:
                    res = grader.grade(task, src, seed=seed)
                row = {**row_of(res), "gpu_before": state}
                rows.append(row)
                print(f"[{arm}] {i}: speedup={row['speedup']} paired={row['paired']} ref={row['ref_ms']} "
                      f"cand={row['cand_ms']} gpu={state}", flush=True)
            sp = [x["speedup"] for x in rows if x["speedup"]]
            pp = [x["paired"] for x in rows if x["paired"]]
            summary = {"speedup": spread(sp), "paired": spread(pp),
                       "ref_ms": spread([x["ref_ms"] for x in rows if x["ref_ms"]]),
                       "cand_ms": spread([x["cand_ms"] for x in rows if x["cand_ms"]])}
            results["arms"][arm] = {"rows": rows, "summary": summary}
            print(f"== {arm}: " + json.dumps({k: {kk: round(vv, 4) for kk, vv in v.items()} for k, v in summary.items()}),
                  flush=True)
    finally:
        grader.close()
    if args.out:
        Path(args.out).write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
