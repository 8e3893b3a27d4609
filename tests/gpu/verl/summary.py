"""The verl stage's summary: per-step time by phase, throughput and drkernel's metrics.

    python tests/gpu/verl/summary.py METRICS_JSONL [--ckpt DIR] [--log PPO_LOG] [--json OUT.json]  > summary.md

Reads the JSONL that verl's ``file`` logger writes (one ``{"step", "data"}`` line a step). verl's
phases (``timing_s/*``): ``gen`` = rollout (vLLM generation and, overlapping it, grading inside
the agent loop), ``old_log_prob``, ``adv`` (drkernel's step), ``update_actor``, ``update_weights``
(FSDP -> vLLM weight sync), ``save_checkpoint``, ``step``. Grading has no phase of its own: its
per-episode wall times come from the agent loop (``drkernel/rollout/*``). evaluations/s =
evaluations / gen; sampled tokens/s = sampled tokens / gen; tokens/s = all prompt + response
tokens of the batch / step (verl's ``perf/total_num_tokens``).

With ``--log`` (ppo_steps.sh's log, every line stamped ``[seconds since launch]``): the start-up,
launch to the start of step 1 (the stamp of verl's ``step:1`` line less step 1's own time), and the
milestones on the way (:data:`MILESTONES`: the first line matching each). With ``--json``: the
figures a scaling table needs (:func:`headline`), for ``scaling.py``.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
from pathlib import Path

PHASES = [("gen", "timing_s/gen"), ("old_logp", "timing_s/old_log_prob"), ("adv", "timing_s/adv"),
          ("update", "timing_s/update_actor"), ("w_sync", "timing_s/update_weights"),
          ("ckpt", "timing_s/save_checkpoint"), ("step", "timing_s/step")]


MEMORY = [("mem_alloc_gb", "actor/perf/max_memory_allocated_gb"), ("mem_reserved_gb", "actor/perf/max_memory_reserved_gb")]
"""The actor's peak memory on rank 0 during the update (verl logs it under ``actor/perf/``)."""

MILESTONES = [  # (name, pattern): the first log line matching each (patterns of verl 0.9.1 / vLLM 0.24)
    ("config composed", r"drkernel: resolved config saved"),
    ("ray up", r"Started a local Ray instance|Connected to Ray cluster"),
    ("worker group created", r"create worker group"),
    ("actor initialised", r"actor and ref model engine initialized"),
    ("vLLM server actor", r"vLLMHttpServer pid=.*\['serve'"),
    ("vLLM engine core", r"EngineCore pid="),
    ("all initialised", r"all initialize finished"),
    ("agent-loop workers", r"AgentLoopWorker"),
    ("step 1 end", r"step:1 - "),
]
_STAMP = re.compile(r"^\[\s*([0-9.]+)\]\s?(.*)$")


def startup(log_text: str, step1_s: float | None) -> dict:
    """``{"startup_s", "step1_end_s", "milestones": {name: seconds}}`` from a stamped log."""
    found: dict[str, float] = {}
    for line in log_text.splitlines():
        m = _STAMP.match(line)
        if not m:
            continue
        t, text = float(m.group(1)), m.group(2)
        for name, pat in MILESTONES:
            if name not in found and re.search(pat, text):
                found[name] = t
    end = found.get("step 1 end")
    return {"startup_s": end - step1_s if end is not None and step1_s is not None else None,
            "step1_end_s": end, "milestones": found}


def headline(rows: list[dict], start: dict | None = None, **labels) -> dict:
    """One run's figures: steady-state means over the steps after the first (step 1 if alone)."""
    steady = [r["data"] for r in rows[1:]] or [r["data"] for r in rows[:1]]

    def mean(key, per=None):
        xs = [d[key] / d[per] if per else d[key] for d in steady
              if d.get(key) is not None and (per is None or d.get(per))]
        return statistics.fmean(xs) if xs else None

    def peak(key):
        xs = [r["data"][key] for r in rows if r["data"].get(key) is not None]
        return max(xs) if xs else None

    out = {**labels, "steps": len(rows), "steady_steps": len(steady),
           "step_s": mean("timing_s/step"), "gen_s": mean("timing_s/gen"), "update_s": mean("timing_s/update_actor"),
           "old_logp_s": mean("timing_s/old_log_prob"), "w_sync_s": mean("timing_s/update_weights"),
           "tokens_per_s": mean("perf/total_num_tokens", "timing_s/step"),
           "sampled_tokens_per_s": mean("drkernel/rollout/sampled_tokens", "timing_s/gen"),
           "evals_per_s": mean("drkernel/rollout/evaluations", "timing_s/gen"),
           "evaluations": mean("drkernel/rollout/evaluations"),
           # where grading goes (the agent loop's metrics): wall seconds per evaluation, the share of
           # it spent waiting for a candidate process to start, evaluations that found one ready
           "grade_s_per_eval": mean("drkernel/rollout/grade_s/sum", "drkernel/rollout/evaluations"),
           "process_start_share": mean("drkernel/rollout/grade_stage_s/process_start", "drkernel/rollout/grade_s/sum"),
           "warm_process_frac": mean("drkernel/rollout/warm_process_frac"),
           "mem_alloc_gb": peak(MEMORY[0][1]), "mem_reserved_gb": peak(MEMORY[1][1]),
           "reward": mean("drkernel/reward/mean")}
    if start:
        out.update(startup_s=start.get("startup_s"), milestones=start.get("milestones"))
    return out


def gpu_memory_peaks(samples: str) -> dict[str, float]:
    """``{gpu index: peak GiB}`` from nvidia-smi's ``index, memory.used [MiB]`` lines."""
    peaks: dict[str, float] = {}
    for line in samples.splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) == 2 and parts[1].isdigit():
            peaks[parts[0]] = max(peaks.get(parts[0], 0.0), int(parts[1]) / 1024)
    return {k: round(v, 2) for k, v in sorted(peaks.items())}


def _f(x) -> str:
    if x is None:
        return "-"
    return f"{x:.3g}" if isinstance(x, float) else str(x)


def summarize(rows: list[dict], ckpt: Path | None = None, start: dict | None = None) -> str:
    lines = ["# verl stage", ""]
    if start is not None:
        ms = ", ".join(f"{k} {v:.0f} s" for k, v in sorted(start["milestones"].items(), key=lambda kv: kv[1]))
        su = start["startup_s"]
        lines += [f"Start-up (launch to the start of step 1): {'-' if su is None else f'{su:.0f} s'}; "
                  f"first log line of each milestone: {ms or '-'}", ""]
    head = ["step", *[p for p, _ in PHASES], "grade_s(sum)", "evals", "evals/s", "sampled_tok/s", "tok/s",
            *[m for m, _ in MEMORY], "reward", "forced_turns"]
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
                 *[d.get(k) for _, k in MEMORY], d.get("drkernel/reward/mean", d.get("critic/score/mean")), d.get("drkernel/rollout/solution_turns")]
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
    ap.add_argument("--log", default=None, help="ppo_steps.sh's stamped log, for the start-up")
    ap.add_argument("--json", default=None, help="write the run's headline figures here (scaling.py)")
    ap.add_argument("--gpu-mem", default=None, help="nvidia-smi samples (index, MiB used), for the peak per GPU")
    for k in ("label", "gpus", "tp", "preset"):
        ap.add_argument(f"--{k}", default=None, help="recorded in --json")
    args = ap.parse_args(argv)
    path = Path(args.metrics)
    rows = [json.loads(x) for x in path.read_text().splitlines() if x.strip()] if path.exists() else []
    start = None
    if args.log and Path(args.log).exists():
        step1 = rows[0]["data"].get("timing_s/step") if rows else None
        start = startup(Path(args.log).read_text(errors="replace"), step1)
    sys.stdout.write(summarize(rows, Path(args.ckpt) if args.ckpt else None, start))
    if args.json:
        labels = {"label": args.label, "gpus": int(args.gpus) if args.gpus else None,
                  "tp": int(args.tp) if args.tp else None, "preset": args.preset}
        head = headline(rows, start, **labels)
        if args.gpu_mem and Path(args.gpu_mem).exists():
            head["gpu_mem_peak_gb"] = gpu_memory_peaks(Path(args.gpu_mem).read_text())
        Path(args.json).write_text(json.dumps(head, indent=1) + "\n")
    return 0 if rows else 1


if __name__ == "__main__":
    sys.exit(main())
