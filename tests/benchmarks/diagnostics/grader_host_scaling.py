"""Summarise grader_host_scaling.sh's arms: per arm, evaluations/min per GPU, mean seconds per
evaluation by grading stage (from bench_grader.py's per-evaluation lines) and the host's CPU use
(vmstat: user, system, idle, runnable processes), so that a stage that grows with the number of
GPUs grading at once stands out.

    python tests/benchmarks/diagnostics/grader_host_scaling.py OUT_DIR
"""

from __future__ import annotations

import re
import statistics
import sys
from collections import defaultdict
from pathlib import Path

LINE = re.compile(r"^\s*\[cap \d+\]\s+\S+\s+(PASS|FAIL)\s+([\d.]+)s\s*(.*)$")
RATE = re.compile(r"^capacity\s+\d+:\s+([\d.]+)\s+evaluations/min")


def parse_log(text: str) -> tuple[list[float], dict[str, float], list[float], int]:
    """(per-evaluation seconds, summed seconds per stage, evaluations/min figures, failures)."""
    totals: list[float] = []
    stages: dict[str, float] = defaultdict(float)
    rates: list[float] = []
    failed = 0
    for line in text.splitlines():
        m = LINE.match(line)
        if m:
            failed += m.group(1) == "FAIL"
            totals.append(float(m.group(2)))
            for part in m.group(3).split():
                key, _, value = part.partition("=")
                try:
                    seconds = float(value)
                except ValueError:
                    continue
                stages[key] += seconds
            continue
        r = RATE.match(line.strip())
        if r:
            rates.append(float(r.group(1)))
    return totals, stages, rates, failed


def vmstat_means(text: str) -> dict[str, float]:
    """Mean us, sy, id, wa and r (runnable) over vmstat's data rows (the first row is since boot)."""
    rows = [ln.split() for ln in text.splitlines() if ln.strip() and ln.split()[0].isdigit()][1:]
    if not rows:
        return {}
    header = "r b swpd free buff cache si so bi bo in cs us sy id wa st".split()
    cols = {k: i for i, k in enumerate(header)}
    return {k: statistics.fmean(float(r[cols[k]]) for r in rows if len(r) > cols[k]) for k in ("r", "us", "sy", "id", "wa")}


def main(out_dir: str) -> int:
    out = Path(out_dir)
    arms = sorted({p.name.split(".")[0] for p in out.glob("*.gpu*.log")}, key=lambda a: (a != "alone", a))
    if not arms:
        print(f"no *.gpu*.log under {out}", file=sys.stderr)
        return 1
    table: dict[str, dict[str, float]] = {}
    heads = []
    for arm in arms:
        totals, stages, rates, failed = [], defaultdict(float), [], 0
        logs = sorted(out.glob(f"{arm}.gpu*.log"))
        for log in logs:
            t, s, r, f = parse_log(log.read_text(errors="replace"))
            totals += t
            rates += r
            failed += f
            for k, v in s.items():
                stages[k] += v
        n = max(1, len(totals))
        table[arm] = {k: v / n for k, v in stages.items()}
        table[arm]["TOTAL"] = sum(totals) / n
        vm = vmstat_means((out / f"{arm}.vmstat").read_text(errors="replace")) if (out / f"{arm}.vmstat").exists() else {}
        heads.append(f"- **{arm}**: {len(logs)} GPU(s), {len(totals)} evaluations ({failed} failed), "
                     f"{statistics.fmean(rates) if rates else float('nan'):.1f} evaluations/min per GPU; host CPU "
                     + ", ".join(f"{k} {v:.1f}" for k, v in vm.items()))
    print("\n".join(heads))
    print()
    keys = sorted(table[arms[-1]], key=lambda k: -table[arms[-1]][k])
    print("| stage (s per evaluation) | " + " | ".join(arms) + " |")
    print("|---" * (len(arms) + 1) + "|")
    for k in keys:
        print(f"| {k} | " + " | ".join(f"{table[a].get(k, 0.0):.2f}" for a in arms) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else "/tmp/grader-host-scaling"))
