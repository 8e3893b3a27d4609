"""One table from several verl-stage runs (ppo_steps.sh's ``summary.json``): how a step scales.

    python tests/gpu/verl/scaling.py OUT/scale-*/summary.json > scaling.md

Per run: start-up, steady-state step time and its phases (means over the steps after the first),
tokens/s (all prompt and response tokens of a step per second of step), evaluations/s (per second
of the rollout phase), both also per GPU, weight-sync time, the actor's peak memory per rank
(verl's ``perf/max_memory_allocated_gb``) and the most any GPU held (nvidia-smi: FSDP rank, vLLM
and the grader's processes together). Scaling against the one-GPU run of the same model and tensor
parallelism: ``speedup = x(G) / x(1)``, ``efficiency = speedup / G``, for tokens/s and
evaluations/s (the targets: 1.7x at 2 GPUs, 3.2x at 4). The baseline is the one-GPU run with the same
grading settings when there is one (the label's part after ``-tpN``, as scaling.sh writes it:
``node-s16-conn1`` = node graders, 16 spares, one CUDA queue), else any one-GPU run of the model;
the ``vs`` column names it. Where grading goes: wall seconds per
evaluation, the share of it waiting for a candidate process to start, and the evaluations that
found a warm process (the agent loop's metrics; "-" for runs before them).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

TARGET_SPEEDUP = {2: 1.7, 4: 3.2}


def _f(x, digits: int = 3) -> str:
    if x is None:
        return "-"
    return f"{x:.{digits}g}" if isinstance(x, float) else str(x)


def pct(x) -> str | None:
    return None if x is None else f"{x:.0%}"


def settings(label: str | None) -> str:
    """The grading settings a scaling.sh label carries after its ``-gN-tpN`` (``""`` for none)."""
    m = re.search(r"-g\d+-tp\d+(?:-(.*))?$", label or "")
    return (m.group(1) or "") if m else ""


def speedups(runs: list[dict]) -> list[dict]:
    """Each run with ``tok_speedup``/``eval_speedup`` (and efficiencies) against its baseline,
    named in ``baseline``: the one-GPU TP 1 run of the same preset and grading settings, else the
    preset's one-GPU TP 1 run with the default settings, else its first one (then ``baseline`` says
    "other settings"); None where there is none. The order of ``runs`` only breaks ties."""
    ones = [r for r in runs if r.get("gpus") == 1 and (r.get("tp") or 1) == 1]
    out = []
    for r in runs:
        same = [b for b in ones if b["preset"] == r["preset"]]
        exact = [b for b in same if settings(b.get("label")) == settings(r.get("label"))]
        plain = [b for b in same if settings(b.get("label")) == ""]
        b = (exact or plain or same or [None])[0]
        row = dict(r)
        if b is not None:
            row["baseline"] = b.get("label") + ("" if exact else " (other settings)")
        for key, name in (("tokens_per_s", "tok"), ("evals_per_s", "eval")):
            if b and r.get(key) and b.get(key):
                row[f"{name}_speedup"] = r[key] / b[key]
                row[f"{name}_efficiency"] = row[f"{name}_speedup"] / r["gpus"]
        out.append(row)
    return out


def table(runs: list[dict]) -> str:
    head = ["run", "model", "GPUs", "TP", "start-up s", "step s", "gen s", "update s", "w_sync s", "tok/s",
            "tok/s/GPU", "tok speedup (eff.)", "evals/s", "evals/s/GPU", "eval speedup (eff.)", "vs",
            "grading s/eval", "of it process start", "warm processes", "actor mem/rank GB", "max GPU held GB", "reward"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in sorted(speedups(runs), key=lambda r: (r["preset"] or "", r.get("tp") or 1, r["gpus"] or 0)):
        g = r.get("gpus") or 1
        peaks = r.get("gpu_mem_peak_gb") or {}

        def sp(name):
            s = r.get(f"{name}_speedup")
            if s is None:
                return "-"
            mark = "" if g not in TARGET_SPEEDUP else (" ok" if s >= TARGET_SPEEDUP[g] else f" < {TARGET_SPEEDUP[g]}")
            return f"{s:.2f}x ({r[f'{name}_efficiency']:.0%}){mark}"

        cells = [r.get("label"), r.get("preset"), g, r.get("tp") or 1, r.get("startup_s"), r.get("step_s"),
                 r.get("gen_s"), r.get("update_s"), r.get("w_sync_s"), r.get("tokens_per_s"),
                 r["tokens_per_s"] / g if r.get("tokens_per_s") else None, sp("tok"), r.get("evals_per_s"),
                 r["evals_per_s"] / g if r.get("evals_per_s") else None, sp("eval"), r.get("baseline"), r.get("grade_s_per_eval"),
                 pct(r.get("process_start_share")), pct(r.get("warm_process_frac")), r.get("mem_alloc_gb"),
                 max(peaks.values()) if peaks else None, r.get("reward")]
        lines.append("| " + " | ".join(_f(c) for c in cells) + " |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("summaries", nargs="+", help="summary.json files of ppo_steps.sh runs")
    args = ap.parse_args(argv)
    runs = []
    for p in args.summaries:
        path = Path(p)
        if path.exists():
            runs.append(json.loads(path.read_text()))
        else:
            print(f"scaling: {p} missing (the run did not finish)", file=sys.stderr)
    sys.stdout.write(table(runs))
    return 0 if runs else 1


if __name__ == "__main__":
    sys.exit(main())
