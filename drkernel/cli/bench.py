"""``drkernel bench --suite DIR``: grade every task of a suite; write results.json, summary.md and speedups.png.

Exit codes (:mod:`drkernel.cli.common`): 0 when the bench ran (failing kernels included), 1 with
``--strict`` when a task did not pass, 2 with one line for unusable input (missing suite, bad
env.yaml, unusable task), 3 when the environment failed (no GPU when one was asked for, a grader
that could not start).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from drkernel.cli.common import UsageError, default_device, error, first_line, load_suite_arg
from drkernel.env.config import PRECISION_POLICIES as PRECISION_CHOICES


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.description = "Grade every task of a suite; write results.json, summary.md and speedups.png."
    p.add_argument("--suite", required=True, help="suite directory, e.g. envs/single_ops")
    p.add_argument("--solutions", default=None,
                   help="directory of candidates named like the tasks (default: the suite's solutions/)")
    p.add_argument("--device", default=None, choices=["cpu", "cuda"], help="default: cuda if available, else cpu")
    p.add_argument("--out", default=None, help="output directory (default: bench_out/<suite id>-<device>)")
    p.add_argument("--workers", type=int, default=None,
                   help="concurrent evaluations (default: 1 on cpu; on cuda 6 per GPU, timing stays exclusive per GPU)")
    p.add_argument("--seed", type=int, default=None, help="fix every hidden seed (reproducible run)")
    p.add_argument("--tasks", default=None, help="comma-separated task-id globs or substrings, e.g. '0*,softmax'")
    p.add_argument("--size", default=None, choices=["small", "full"],
                   help="task size knob (DRKERNEL_TASK_SIZE); default: small on cpu, full on cuda")
    p.add_argument("--strict", action="store_true", help="exit 1 unless every task passes (for CI)")
    p.add_argument("--precision", default=None, choices=PRECISION_CHOICES,
                   help="precision policy for every task (default: the suite's, else each task's, else 'reference')")
    p.add_argument("--no-plot", action="store_true", help="do not write speedups.png")
    p.add_argument("--quiet", action="store_true", help="no per-task progress lines")
    p.add_argument("--merge", nargs="+", default=None, metavar="DIR",
                   help="grade nothing: merge the --out directories of earlier (split or cut-short) runs "
                        "into one report; a task in several keeps the last one's outcome")


def _merge(args: argparse.Namespace, suite) -> int:  # noqa: ANN001 - a drkernel.env.Suite
    from drkernel.bench import format_summary, merge_reports
    from drkernel.data._deps import MissingDependency

    if not args.out:
        raise UsageError("--merge needs --out")
    out = Path(args.out)
    try:
        report = merge_reports(suite, args.merge, out=out, plot=not args.no_plot)
    except (ValueError, OSError, KeyError, MissingDependency) as exc:
        raise UsageError(first_line(exc)) from None
    print(format_summary(report))
    print(f"wrote {out / 'results.json'}, {out / 'summary.md'}")
    return report.exit_code(strict=args.strict)


def main(args: argparse.Namespace) -> int:
    from drkernel.bench import ENV_FAILURE, TASK_ERROR, format_summary, run_bench
    from drkernel.data._deps import MissingDependency
    from drkernel.env.tasks.suite import SuiteError

    if args.workers is not None and args.workers < 1:
        raise UsageError(f"--workers must be >= 1, got {args.workers}")
    suite = load_suite_arg(args.suite)
    if args.merge:
        return _merge(args, suite)
    device = args.device or default_device()
    out = Path(args.out) if args.out else Path("bench_out") / f"{suite.id}-{device}"
    try:
        report = run_bench(suite, solutions=args.solutions, device=device, out=out, workers=args.workers,
                           seed=args.seed, tasks=args.tasks, size=args.size,
                           overrides={"precision": args.precision} if args.precision else None,
                           progress=None if args.quiet else sys.stderr, plot=not args.no_plot)
    except (SuiteError, ValueError, MissingDependency) as exc:
        raise UsageError(first_line(exc)) from None
    print(format_summary(report))
    print(f"wrote {out / 'results.json'}, {out / 'summary.md'}"
          + ("" if args.no_plot or not (out / "speedups.png").exists() else f", {out / 'speedups.png'}"))
    code = report.exit_code(strict=args.strict)
    if code == 3:
        failed = report.by_status(ENV_FAILURE)
        error("drkernel bench", f"environment failure: {len(failed)} task(s) could not be graded "
                                f"(first: {failed[0].message})")
    elif code == 2:
        bad = report.by_status(TASK_ERROR)
        error("drkernel bench", f"{len(bad)} unusable task(s) (first: {bad[0].message})")
    return code


__all__ = ["add_arguments", "main"]
