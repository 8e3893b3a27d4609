"""Repeat the timing of one candidate N times (fresh seeds) and report the spread.

    python tests/benchmarks/diagnostics/timing_spread.py --task T.py --candidate C.py --repeats 10 [--out spread.json]
"""

import argparse
import json
import statistics
from pathlib import Path

from drkernel.env.config import EvalConfig
from drkernel.env.evaluation import evaluate


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--task", required=True)
    p.add_argument("--candidate", required=True)
    p.add_argument("--repeats", type=int, default=10)
    p.add_argument("--device", default="cuda")
    p.add_argument("--out")
    args = p.parse_args()
    cfg = EvalConfig(device=args.device, profile=False)
    rows = []
    for i in range(args.repeats):
        r = evaluate(Path(args.task), Path(args.candidate), seed=1000 + i, config=cfg)
        t = r.details.get("timing", {})
        rows.append({"run": i, "passed": r.passed, "kernel_ms": r.kernel_ms, "reference_ms": r.reference_ms,
                     "speedup": r.speedup, "kernel_p25": t.get("candidate_ms", {}).get("p25"),
                     "kernel_p75": t.get("candidate_ms", {}).get("p75")})
        print(f"run {i}: passed={r.passed} kernel {r.kernel_ms} ms ref {r.reference_ms} ms speedup {r.speedup}",
              flush=True)
    ks = [r["kernel_ms"] for r in rows if r["kernel_ms"]]
    ss = [r["speedup"] for r in rows if r["speedup"]]
    if not ks:
        raise SystemExit(f"no run produced a timing: {r.error}")
    summary = {
        "kernel_ms_median": statistics.median(ks), "kernel_ms_min": min(ks), "kernel_ms_max": max(ks),
        "kernel_ms_cv": statistics.pstdev(ks) / statistics.mean(ks),
        "speedup_median": statistics.median(ss), "speedup_min": min(ss), "speedup_max": max(ss),
        "speedup_cv": statistics.pstdev(ss) / statistics.mean(ss),
    }
    print(json.dumps(summary, indent=2))
    if args.out:
        with open(args.out, "w") as fh:
            json.dump({"task": args.task, "candidate": args.candidate, "runs": rows, "summary": summary}, fh, indent=2)


if __name__ == "__main__":
    main()
