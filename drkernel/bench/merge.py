"""``drkernel bench --merge``: one report from several runs of one suite (split or cut-short jobs)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from drkernel.bench.outcomes import BenchReport, TaskOutcome, read_outcomes, summarize
from drkernel.bench.report import write_report
from drkernel.env.tasks.suite import Suite, load_suite


def merge_reports(suite: Suite | str | os.PathLike, parts: list[str | os.PathLike], *,
                  out: str | os.PathLike | None = None, plot: bool = True) -> BenchReport:
    """One report from several runs of the same suite (a long suite split over time-limited jobs,
    or a task re-run). A task graded in several parts keeps its outcome from the *last* part.

    Raises:
        ValueError: a part with no results, parts for other suites or devices.
    """
    if not isinstance(suite, Suite):
        suite = load_suite(suite)
    if not parts:
        raise ValueError("nothing to merge: no part directories given")
    by_task: dict[str, TaskOutcome] = {}
    meta: dict[str, Any] = {}
    origins: list[dict[str, Any]] = []
    for part in parts:
        data, outcomes = read_outcomes(part)
        origins.append({"part": str(part), "tasks": [o.task for o in outcomes],
                        **{k: data.get(k) for k in ("versions", "gpu", "cpu")}})
        if data.get("suite") not in (None, suite.id):
            raise ValueError(f"{part} is a run of {data['suite']}, not {suite.id}")
        if None not in (data.get("device"), meta.get("device")) and data["device"] != meta["device"]:
            raise ValueError(f"{part}: device {data['device']!r} differs from an earlier part's {meta['device']!r}")
        meta.update({k: v for k, v in data.items() if v is not None})
        by_task.update({o.task: o for o in outcomes})
    device = meta.get("device") or "cuda"
    config = suite.eval_config(device=device, task_size=meta.get("task_size"))
    report = BenchReport(suite=suite, device=device, config=config,
                         solutions_dir=Path(meta.get("solutions") or parts[-1]), seed=meta.get("seed"))
    report.outcomes = [by_task[t.id] for t in suite.tasks if t.id in by_task]
    report.summary = summarize(report.outcomes)
    report.wall_seconds = sum(o.seconds for o in report.outcomes)
    report.merged_from = origins
    if out is not None:
        write_report(report, out, plot=plot)
    return report


__all__ = ["merge_reports"]
