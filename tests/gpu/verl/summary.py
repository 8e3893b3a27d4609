"""The verl stage's summary: per-step time by phase, throughput and drkernel's metrics.

    python tests/gpu/verl/summary.py METRICS_JSONL [--ckpt DIR]  > summary.md

Reads the JSONL that verl's ``file`` logger writes (one ``{"step", "data"}`` line a step). verl's
phases (``timing_s/*``): ``gen`` = rollout (vLLM generation and, overlapping it, grading inside
the agent loop), ``old_log_prob``, ``adv`` (drkernel's step), ``update_actor``, ``update_weights``
(FSDP -> vLLM weight sync), ``save_checkpoint``, ``step``. Grading has no phase of its own: its
per-episode wall times come from the agent loop (``drkernel/rollout/*``). evaluations/s =
evaluations / gen; sampled tokens/s = sampled tokens / gen; tokens/s = all prompt + response
tokens of the batch / step (verl's ``perf/total_num_tokens``).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

PHASES = [("gen", "timing_s/gen"), ("old_logp", "timing_s/old_log_prob"), ("adv", "timing_s/adv"),
          ("update", "timing_s/update_actor"), ("w_sync", "timing_s/update_weights"),
          ("ckpt", "timing_s/save_checkpoint"), ("step", "timing_s/step")]


def _f(x) -> str:
    if x is None:
        return "-"
    return f"{x:.3g}" if isinstance(x, float) else str(x)


def summarize(rows: list[dict], ckpt: Path | None = None) -> str:
    lines = ["# verl stage", ""]
    head = ["step", *[p for p, _ in PHASES], "grade_s(sum)", "evals", "evals/s", "sampled_tok/s", "tok/s",
            "reward", "forced_turns"]
    lines += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        d = r["data"]
        gen = d.get("timing_s/gen")
        evals = d.get("drkernel/rollout/evaluations")
        sampled = d.get("drkernel/rollout/sampled_tokens")
        tokens = d.get("perf/total_num_tokens")
        cells = [r["step"], *[d.get(k) for _, k in PHASES], d.get("drkernel/rollout/grade_s/sum"), evals,
                 evals / gen if evals is not None and gen else None,
                 sampled / gen if sampled is not None and gen else None,
                 tokens / d["timing_s/step"] if tokens is not None and d.get("timing_s/step") else None,
                 d.get("drkernel/reward/mean", d.get("critic/score/mean")), d.get("drkernel/rollout/solution_turns")]
        lines.append("| " + " | ".join(_f(c) for c in cells) + " |")
    lines += ["", "Seconds. `gen` is the rollout phase: vLLM generation and the grading inside the agent loop, "
              "which overlap; `grade_s(sum)` adds up the episodes' grading wall time. evals/s and "
              "sampled_tok/s are per second of `gen`; tok/s is all tokens of the batch per second of `step`."]
    if rows:
        last = rows[-1]["data"]
        groups = [("drkernel: per turn (kernel verdicts, rewards)", ("drkernel/kernel/", "drkernel/reward/")),
                  ("drkernel: MRS / PRS / filter / TRLOO / step", ("drkernel/mrs/", "drkernel/prs/", "drkernel/filter/",
                                                                    "drkernel/trloo/", "drkernel/step/", "drkernel/turn_mask/")),
                  ("drkernel: rollout", ("drkernel/rollout/",)),
                  ("verl: actor / perf / response", ("actor/", "perf/", "response_length/", "critic/score",
                                                     "timing_per_token_ms/", "training/"))]
        for title, prefixes in groups:
            keys = sorted(k for k in last if k.startswith(prefixes))
            if keys:
                lines += ["", f"## {title} (step {rows[-1]['step']})", ""]
                lines += [f"- `{k}`: {_f(last[k])}" for k in keys]
    if ckpt is not None:
        files = sorted(p for p in ckpt.rglob("*") if p.is_file()) if ckpt.exists() else []
        size = sum(p.stat().st_size for p in files) / 2**20
        lines += ["", f"## checkpoint: {ckpt} ({len(files)} files, {size:.1f} MiB)", ""]
        lines += [f"- {p.relative_to(ckpt)}" for p in files[:40]]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("metrics", help="verl's file-logger JSONL")
    ap.add_argument("--ckpt", default=None, help="trainer.default_local_dir, to list what was saved")
    args = ap.parse_args(argv)
    path = Path(args.metrics)
    rows = [json.loads(x) for x in path.read_text().splitlines() if x.strip()] if path.exists() else []
    sys.stdout.write(summarize(rows, Path(args.ckpt) if args.ckpt else None))
    return 0 if rows else 1


if __name__ == "__main__":
    sys.exit(main())
