"""What a bench run produced: one :class:`TaskOutcome` per task, the :class:`BenchReport`, its summary.

Summary metrics (over graded tasks, i.e. all tasks except environment failures and task errors;
"no candidate" counts as a failed kernel), computed by :func:`drkernel.metrics.kernel_metrics`
with one turn per task:

* ``correctness_rate`` = #pass / #graded, where pass = compiled and correct and not hacked;
* ``fast@p`` = #(pass and speedup >= p) / #graded: the paper's Fast@p (``>=``, as Dr. Kernel);
* ``geomean_speedup`` = exp(mean log s) over passing kernels;
* ``hack_rate`` = #hacked / #graded.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from drkernel.env.config import EvalConfig
from drkernel.env.result import EvalResult
from drkernel.env.tasks.suite import Suite

#: Outcome statuses. Only the first three are kernel verdicts.
PASS, FAIL, NO_CANDIDATE, ENV_FAILURE, TASK_ERROR = "pass", "fail", "no_candidate", "environment_failure", "task_error"
GRADED = (PASS, FAIL, NO_CANDIDATE)
REPORTED_FAST = (1.0, 1.2)
"""Fast@p thresholds in the printed table (results.json has all of metrics.FAST_THRESHOLDS)."""
PARTIAL_NAME = "results.partial.jsonl"
"""One outcome per line, appended as each task finishes; removed once results.json is written."""


@dataclass
class TaskOutcome:
    """What happened to one task of the bench."""

    task: str
    """Task id (file stem)."""
    candidate: Path | None
    """The graded file; None when there was none."""
    status: str
    """``pass``, ``fail``, ``no_candidate``, ``environment_failure`` or ``task_error``."""
    result: EvalResult | None = None
    """The verdict (also a synthetic failed result for ``no_candidate``); None otherwise."""
    message: str | None = None
    """Why, for ``environment_failure`` and ``task_error``."""
    seconds: float = 0.0
    """Wall time of the evaluation (0 when nothing was graded)."""

    def to_dict(self) -> dict[str, Any]:
        return {"task": self.task, "candidate": str(self.candidate) if self.candidate else None,
                "status": self.status, "seconds": round(self.seconds, 3), "message": self.message,
                "result": self.result.to_dict() if self.result else None}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "TaskOutcome":
        """Inverse of :meth:`to_dict` (a results.json task entry or a results.partial.jsonl line)."""
        return cls(data["task"], Path(data["candidate"]) if data.get("candidate") else None, data["status"],
                   EvalResult.from_dict(data["result"]) if data.get("result") else None, data.get("message"),
                   float(data.get("seconds") or 0.0))


@dataclass
class BenchReport:
    """A bench run (or a merge of several): its settings, outcomes in suite order, and summary."""

    suite: Suite
    device: str
    config: EvalConfig
    """The grading protocol used (the suite's env.yaml on ``device``, with overrides)."""
    solutions_dir: Path
    seed: int | None
    outcomes: list[TaskOutcome] = field(default_factory=list)
    summary: dict[str, Any] = field(default_factory=dict)
    """:func:`summarize` of ``outcomes``."""
    unmatched_candidates: list[str] = field(default_factory=list)
    """Files in the solutions directory whose name matches no task (likely misnamed)."""
    out_dir: Path | None = None
    wall_seconds: float = 0.0
    merged_from: list[dict[str, Any]] | None = None
    """For a merged report: each part's directory, versions, GPU and CPU (where it ran)."""

    def by_status(self, status: str) -> list[TaskOutcome]:
        return [o for o in self.outcomes if o.status == status]

    @property
    def all_passed(self) -> bool:
        return bool(self.outcomes) and all(o.status == PASS for o in self.outcomes)

    def exit_code(self, strict: bool = False) -> int:
        """3 on any environment failure, 2 on an unusable task, 1 if ``strict`` and a task did not pass."""
        if self.by_status(ENV_FAILURE):
            return 3
        if self.by_status(TASK_ERROR):
            return 2
        if strict and not self.all_passed:
            return 1
        return 0


def summarize(outcomes: list[TaskOutcome]) -> dict[str, Any]:
    """Suite-level numbers (module doc); rates are nan when nothing was graded."""
    import torch

    from drkernel.metrics.kernel import FAST_THRESHOLDS, kernel_metrics

    graded = [o for o in outcomes if o.status in GRADED and o.result is not None]
    n = len(graded)
    summary: dict[str, Any] = {
        "tasks": len(outcomes), "graded": n, "passed": sum(o.status == PASS for o in graded),
        "compiled": sum(o.result.compiled for o in graded), "hacked": sum(o.result.hacked for o in graded),
        "no_candidate": sum(o.status == NO_CANDIDATE for o in graded),
        "environment_failures": sum(o.status == ENV_FAILURE for o in outcomes),
        "task_errors": sum(o.status == TASK_ERROR for o in outcomes),
    }
    nan = float("nan")
    if n == 0:
        summary.update({"correctness_rate": nan, "geomean_speedup": nan, "hack_rate": nan,
                        "fast": {f"{p:g}": nan for p in FAST_THRESHOLDS}})
    else:
        # one turn per task: (N, 1) tensors
        correct = torch.tensor([[o.result.compiled and o.result.correct] for o in graded], dtype=torch.bool)
        speedup = torch.tensor([[o.result.speedup if o.result.speedup is not None else nan] for o in graded],
                               dtype=torch.float64)
        hacked = torch.tensor([[o.result.hacked] for o in graded], dtype=torch.bool)
        m = kernel_metrics(correct, speedup, hacked, thresholds=FAST_THRESHOLDS, prefix="bench")
        summary.update({
            "correctness_rate": m["bench/turn_1/correctness_rate"],
            "geomean_speedup": m["bench/turn_1/geomean_speedup"],
            "hack_rate": m["bench/turn_1/hack_rate"],
            "fast": {f"{p:g}": m[f"bench/turn_1/fast@{p:g}_in_all"] for p in FAST_THRESHOLDS},
        })
    for p in REPORTED_FAST:
        summary[f"fast@{p:g}"] = summary["fast"][f"{p:g}"]
    return summary


def read_outcomes(part: str | os.PathLike) -> tuple[dict[str, Any], list[TaskOutcome]]:
    """Outcomes of one earlier run: its ``results.json``, or ``results.partial.jsonl`` if it was cut
    short. Returns (run metadata, outcomes); the metadata is empty for a partial run.

    Raises:
        ValueError: the directory holds neither file.
    """
    part = Path(part)
    full, partial = part / "results.json", part / PARTIAL_NAME
    if full.is_file():
        data = json.loads(full.read_text(encoding="utf-8"))
        rows = data.get("tasks", [])
    elif partial.is_file():
        data = {}
        rows = [json.loads(line) for line in partial.read_text(encoding="utf-8").splitlines() if line.strip()]
    else:
        raise ValueError(f"{part} holds neither results.json nor {PARTIAL_NAME}")
    return data, [TaskOutcome.from_dict(row) for row in rows]


__all__ = ["PASS", "FAIL", "NO_CANDIDATE", "ENV_FAILURE", "TASK_ERROR", "GRADED", "REPORTED_FAST", "PARTIAL_NAME",
           "TaskOutcome", "BenchReport", "summarize", "read_outcomes"]
