"""Suite benchmark: grade a directory of candidates against every task of a suite.

``drkernel bench --suite envs/single_ops`` grades the suite's own ``solutions/``;
``--solutions DIR`` grades someone else's (a candidate's file name is its task's file name, and a
task without one fails as "no candidate"). Writes, under ``--out``: ``results.json``,
``summary.md``, ``speedups.png``, and ``results.partial.jsonl`` while the run is going.

Modules, one job each:

* :mod:`~drkernel.bench.run`: ``run_bench``, grading through a :class:`~drkernel.env.Grader`;
* :mod:`~drkernel.bench.outcomes`: ``TaskOutcome``, ``BenchReport``, ``summarize`` (the metrics),
  ``read_outcomes``;
* :mod:`~drkernel.bench.report`: progress lines, tables, ``results.json``, ``write_report``;
* :mod:`~drkernel.bench.plot`: ``speedups.png``;
* :mod:`~drkernel.bench.merge`: ``merge_reports`` (``--merge``).
"""

from __future__ import annotations

from drkernel.bench.merge import merge_reports
from drkernel.bench.outcomes import (ENV_FAILURE, FAIL, GRADED, NO_CANDIDATE, PARTIAL_NAME, PASS, REPORTED_FAST,
                                     TASK_ERROR, BenchReport, TaskOutcome, read_outcomes, summarize)
from drkernel.bench.plot import plot_speedups
from drkernel.bench.report import (environment_info, format_markdown, format_summary, progress_line, results_dict,
                                   write_report)
from drkernel.bench.run import default_device, grade_jobs, run_bench

__all__ = ["run_bench", "grade_jobs", "merge_reports", "read_outcomes", "BenchReport", "TaskOutcome", "summarize",
           "format_summary", "format_markdown", "write_report", "plot_speedups", "results_dict",
           "environment_info", "progress_line", "default_device", "PASS", "FAIL", "NO_CANDIDATE", "ENV_FAILURE",
           "TASK_ERROR", "GRADED", "REPORTED_FAST", "PARTIAL_NAME"]
