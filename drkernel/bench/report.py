"""Bench reporting: progress lines, the terminal and markdown tables, results.json, and the files on disk.

``write_report`` writes, under the output directory:

* ``results.json``: suite, device, versions, the EvalConfig used, the summary, and per task
  ``{task, candidate, status, result: EvalResult.to_dict()}``;
* ``summary.md``: the summary table and a per-task table;
* ``speedups.png``: see :mod:`drkernel.bench.plot` (skipped with a warning without matplotlib).
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import platform
import sys
from pathlib import Path
from typing import Any

from drkernel.bench.fmt import num as _num
from drkernel.bench.fmt import pct
from drkernel.bench.outcomes import ENV_FAILURE, NO_CANDIDATE, PASS, REPORTED_FAST, TASK_ERROR, BenchReport, TaskOutcome
from drkernel.bench.plot import plot_speedups
from drkernel.env.result import EvalResult


def progress_line(i: int, n: int, o: TaskOutcome, width: int = 0) -> str:
    """``[12/27] 05_softmax  PASS 1.83x cov 0.97 (2.1s)``."""
    head = f"[{i:>{len(str(n))}}/{n}] {o.task:<{width}}"
    r = o.result
    if o.status == PASS and r is not None:
        speed = f"{r.speedup:.3g}x" if r.speedup is not None else "-"
        cov = f" cov {r.coverage:.2f}" if r.coverage is not None else ""
        return f"{head} PASS {speed}{cov} ({o.seconds:.1f}s)"
    if o.status == NO_CANDIDATE:
        return f"{head} FAIL no candidate"
    if o.status == ENV_FAILURE:
        return f"{head} ENV-FAIL {o.message} ({o.seconds:.1f}s)"
    if o.status == TASK_ERROR:
        return f"{head} TASK-ERROR {o.message}"
    return f"{head} FAIL {why(r)} ({o.seconds:.1f}s)"


def why(r: EvalResult | None) -> str:
    """Why a kernel failed, in a word or two: the hack reasons, the failed stage, or ``incorrect``."""
    if r is None:
        return "-"
    if r.hack_reasons:
        return "hacked: " + ",".join(r.hack_reasons)
    if r.error is not None:
        return r.error.stage
    return "incorrect"


def summary_rows(s: dict[str, Any]) -> list[tuple[str, str]]:
    """(label, value) rows of the summary table, shared by the terminal and markdown outputs."""
    g = s["graded"]
    rows = [
        ("tasks", str(s["tasks"])),
        ("graded", str(g)),
        ("correctness rate (pass)", f"{pct(s['correctness_rate'])} ({s['passed']}/{g})"),
    ]
    rows += [(f"Fast@{p:g}", pct(s[f"fast@{p:g}"])) for p in REPORTED_FAST]
    rows += [
        ("geomean speedup (passing)", _num(s["geomean_speedup"], ".3g", "x")),
        ("hack rate", f"{pct(s['hack_rate'])} ({s['hacked']}/{g})"),
        ("compiled", f"{s['compiled']}/{g}"),
        ("no candidate", str(s["no_candidate"])),
        ("environment failures (not graded)", str(s["environment_failures"])),
        ("task errors (not graded)", str(s["task_errors"])),
    ]
    return rows


CPU_NOTE = ("On the CPU the kernels run in Triton's interpreter: correctness, integrity and coverage are real, but "
            "times are the interpreter's (thousands of times slower than a GPU), so speedup and Fast@p say "
            "nothing about GPU performance. Grade on a CUDA GPU (--device cuda) for those.")


def format_summary(report: BenchReport) -> str:
    """Plain-text summary table for the terminal."""
    rows = summary_rows(report.summary)
    w = max(len(k) for k, _ in rows)
    lines = [f"{report.suite.id} on {report.device} (size {report.config.resolved_task_size()}, "
             f"{report.wall_seconds:.1f}s)"]
    lines += [f"  {k:<{w}}  {v}" for k, v in rows]
    if report.device == "cpu":
        lines.append("  note: " + CPU_NOTE)
    for o in report.by_status(ENV_FAILURE):
        lines.append(f"  environment failure: {o.task}: {o.message}")
    for o in report.by_status(TASK_ERROR):
        lines.append(f"  task error: {o.task}: {o.message}")
    if report.unmatched_candidates:
        lines.append(f"  candidates matching no task: {', '.join(report.unmatched_candidates)}")
    return "\n".join(lines)


def _task_row(o: TaskOutcome) -> list[str]:
    r = o.result
    if o.status in (ENV_FAILURE, TASK_ERROR):
        return [o.task, o.status.replace("_", " "), "-", "-", "-", "-", o.message or ""]
    note = "no candidate" if o.status == NO_CANDIDATE else ("" if o.status == PASS else why(r))
    return [o.task, "yes" if o.status == PASS else "no", _num(r.speedup, ".3g", "x"), _num(r.coverage, ".2f"),
            _num(r.kernel_ms, ".4g"), _num(r.reference_ms, ".4g"), note]


def format_markdown(report: BenchReport) -> str:
    """summary.md: the protocol in one sentence, the summary table and one row per task."""
    cfg = report.config
    lines = [f"# Bench: {report.suite.id} on {report.device}", "",
             f"Solutions `{report.solutions_dir}`; size {cfg.resolved_task_size()}; seed {report.seed}; "
             f"{cfg.trials_per_distribution} trial(s) x {len(cfg.distributions)} distribution(s); "
             f"timing {cfg.warmup} warm-up + {cfg.timing_trials} calls, reference {cfg.reference_backend}.", "",
             *([f"Merged from {len(report.merged_from)} runs (`drkernel bench --merge`): "
                + "; ".join(f"`{Path(m['part']).name}` ({len(m['tasks'])} tasks)" for m in report.merged_from)
                + ". A task graded in several keeps the last run's outcome.", ""] if report.merged_from else []),
             *([f"> {CPU_NOTE}", ""] if report.device == "cpu" else []),
             "| metric | value |", "| --- | --- |"]
    lines += [f"| {k} | {v} |" for k, v in summary_rows(report.summary)]
    lines += ["", "| task | pass | speedup | coverage | kernel_ms | reference_ms | error stage |",
              "| --- | --- | --- | --- | --- | --- | --- |"]
    for o in report.outcomes:
        lines.append("| " + " | ".join(c.replace("|", "\\|").replace("\n", " ") for c in _task_row(o)) + " |")
    if report.unmatched_candidates:
        lines += ["", "Candidates matching no task: " + ", ".join(f"`{n}`" for n in report.unmatched_candidates)]
    return "\n".join(lines) + "\n"


def jsonable(x: Any) -> Any:
    """Strict JSON: non-finite floats become null, paths strings, tuples lists."""
    if isinstance(x, float):
        return x if math.isfinite(x) else None
    if isinstance(x, dict):
        return {str(k): jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [jsonable(v) for v in x]
    if isinstance(x, Path):
        return str(x)
    return x


def environment_info(device: str) -> dict[str, Any]:
    """Versions (python, torch, triton, drkernel), the GPU name on cuda, and the CPU."""
    import torch

    import drkernel

    try:
        import triton

        triton_version = triton.__version__
    except ImportError:  # pragma: no cover
        triton_version = None
    gpu = None
    if device.startswith("cuda") and torch.cuda.is_available():
        idx = int(device.split(":")[1]) if ":" in device else 0
        gpu = torch.cuda.get_device_name(idx)
    return {"python": platform.python_version(), "torch": torch.__version__, "triton": triton_version,
            "drkernel": drkernel.__version__, "gpu": gpu, "cpu": platform.processor() or platform.machine()}


def results_dict(report: BenchReport) -> dict[str, Any]:
    """The content of results.json (strict JSON)."""
    if report.merged_from:  # where the parts ran, not where they were merged
        last = report.merged_from[-1]
        info = {"python": None, "torch": None, "triton": None, "drkernel": None, "gpu": last.get("gpu"),
                "cpu": last.get("cpu"), **(last.get("versions") or {})}
    else:
        info = environment_info(report.device)
    return jsonable({
        "suite": report.suite.id, "suite_path": report.suite.root, "device": report.device,
        "task_size": report.config.resolved_task_size(), "seed": report.seed, "solutions": report.solutions_dir,
        "versions": {k: info[k] for k in ("python", "torch", "triton", "drkernel")}, "gpu": info["gpu"],
        "cpu": info["cpu"], "config": dataclasses.asdict(report.config), "wall_seconds": round(report.wall_seconds, 3),
        "summary": report.summary,
        "environment_failures": [{"task": o.task, "message": o.message} for o in report.by_status(ENV_FAILURE)],
        "task_errors": [{"task": o.task, "message": o.message} for o in report.by_status(TASK_ERROR)],
        "unmatched_candidates": report.unmatched_candidates,
        "tasks": [o.to_dict() for o in report.outcomes],
        **({"merged_from": report.merged_from} if report.merged_from else {}),
    })


def write_report(report: BenchReport, out: str | os.PathLike, *, plot: bool = True) -> Path:
    """results.json, summary.md and (if ``plot`` and matplotlib is installed) speedups.png under ``out``."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    report.out_dir = out
    (out / "results.json").write_text(json.dumps(results_dict(report), indent=2) + "\n", encoding="utf-8")
    (out / "summary.md").write_text(format_markdown(report), encoding="utf-8")
    if plot:
        from drkernel.data._deps import MissingDependency

        try:
            plot_speedups(report, out / "speedups.png")
        except MissingDependency as exc:
            print(f"drkernel: warning: speedups.png not written: {exc}", file=sys.stderr)
    return out


__all__ = ["progress_line", "why", "summary_rows", "format_summary", "format_markdown", "jsonable",
           "environment_info", "results_dict", "write_report"]
