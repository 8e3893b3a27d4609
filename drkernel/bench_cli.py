"""``drkernel bench`` and ``drkernel data {build,import-kernelbench}`` (registered by drkernel.cli).

Exit codes, as for every drkernel command: 0 when the command ran (a bench with failing kernels
included), 1 with ``bench --strict`` when a task did not pass, 2 with a one-line reason for
unusable input (missing suite, bad env.yaml, unusable task), 3 when the environment failed
(no GPU when one was asked for, a grader that could not start).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from drkernel.cli import UsageError


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("bench", help="grade a directory of candidates against a task suite",
                       description="Grade every task of a suite; write results.json, summary.md and speedups.png.")
    p.add_argument("--suite", required=True, help="suite directory, e.g. envs/single_ops")
    p.add_argument("--solutions", default=None,
                   help="directory of candidates named like the tasks (default: the suite's solutions/)")
    p.add_argument("--device", default=None, choices=["cpu", "cuda"], help="default: cuda if available, else cpu")
    p.add_argument("--out", default=None, help="output directory (default: bench_out/<suite id>-<device>)")
    p.add_argument("--workers", type=int, default=1, help="concurrent evaluations (>1 uses the pool executor)")
    p.add_argument("--seed", type=int, default=None, help="fix every hidden seed (reproducible run)")
    p.add_argument("--tasks", default=None, help="comma-separated task-id globs or substrings, e.g. '0*,softmax'")
    p.add_argument("--size", default=None, choices=["small", "full"],
                   help="task size knob (DRKERNEL_TASK_SIZE); default: small on cpu, full on cuda")
    p.add_argument("--strict", action="store_true", help="exit 1 unless every task passes (for CI)")
    p.add_argument("--no-plot", action="store_true", help="do not write speedups.png")
    p.add_argument("--quiet", action="store_true", help="no per-task progress lines")
    p.add_argument("--merge", nargs="+", default=None, metavar="DIR",
                   help="grade nothing: merge the --out directories of earlier (split or cut-short) runs "
                        "into one report; a task in several keeps the last one's outcome")
    p.set_defaults(func=cmd_bench)

    data = sub.add_parser("data", help="build training data from a suite, import KernelBench")
    dsub = data.add_subparsers(dest="data_command", required=True)
    b = dsub.add_parser("build", help="one verl RLHFDataset row per task (parquet, or JSONL for *.jsonl)")
    b.add_argument("--suite", required=True, help="suite directory, e.g. envs/single_ops")
    b.add_argument("--out", required=True, help="output file: *.parquet or *.jsonl")
    b.add_argument("--split-test", type=int, default=0, metavar="N",
                   help="put N random tasks in <out stem>_test<suffix> instead")
    b.add_argument("--seed", type=int, default=0, help="seed of the test split")
    b.add_argument("--template", default=None, help="prompt template (default: the suite's prompt_template)")
    b.add_argument("--agent-name", default=None, help="add verl's per-row agent_name column with this value")
    b.set_defaults(func=cmd_data_build)

    k = dsub.add_parser("import-kernelbench", help="turn a local KernelBench checkout into a suite directory")
    k.add_argument("dir", help="KernelBench checkout (holding KernelBench/level1/ or level1/)")
    k.add_argument("--out", required=True, help="suite directory to create, e.g. envs/kernelbench")
    k.add_argument("--levels", type=int, nargs="+", default=None, help="levels to import (default: 1 2 3 if present)")
    k.add_argument("--id", default=None, help="suite id (default: <out dir name>-v0)")
    k.add_argument("--force", action="store_true", help="replace the tasks of an existing suite directory")
    k.set_defaults(func=cmd_import_kernelbench)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def cmd_bench(args: argparse.Namespace) -> int:
    from drkernel.bench import ENV_FAILURE, TASK_ERROR, default_device, format_summary, run_bench
    from drkernel.data._deps import MissingDependency
    from drkernel.env.suite import SuiteError, load_suite

    if args.workers < 1:
        raise UsageError(f"--workers must be >= 1, got {args.workers}")
    try:
        suite = load_suite(args.suite)
    except SuiteError as exc:
        raise UsageError(_first_line(exc)) from None
    if args.merge:
        from drkernel.bench import merge_reports

        if not args.out:
            raise UsageError("--merge needs --out")
        out = Path(args.out)
        try:
            report = merge_reports(suite, args.merge, out=out, plot=not args.no_plot)
        except (ValueError, OSError, KeyError, MissingDependency) as exc:
            raise UsageError(_first_line(exc)) from None
        print(format_summary(report))
        print(f"wrote {out / 'results.json'}, {out / 'summary.md'}")
        return report.exit_code(strict=args.strict)
    device = args.device or default_device()
    out = Path(args.out) if args.out else Path("bench_out") / f"{suite.id}-{device}"
    try:
        report = run_bench(suite, solutions=args.solutions, device=device, out=out, workers=args.workers,
                           seed=args.seed, tasks=args.tasks, size=args.size,
                           progress=None if args.quiet else sys.stderr, plot=not args.no_plot)
    except (SuiteError, ValueError, MissingDependency) as exc:
        raise UsageError(_first_line(exc)) from None
    print(format_summary(report))
    print(f"wrote {out / 'results.json'}, {out / 'summary.md'}"
          + ("" if args.no_plot or not (out / "speedups.png").exists() else f", {out / 'speedups.png'}"))
    code = report.exit_code(strict=args.strict)
    if code == 3:
        n = len(report.by_status(ENV_FAILURE))
        print(f"drkernel: environment failure: {n} task(s) could not be graded "
              f"(first: {report.by_status(ENV_FAILURE)[0].message})", file=sys.stderr)
    elif code == 2:
        bad = report.by_status(TASK_ERROR)
        print(f"drkernel: error: {len(bad)} unusable task(s) (first: {bad[0].message})", file=sys.stderr)
    return code


def cmd_data_build(args: argparse.Namespace) -> int:
    from drkernel.data._deps import MissingDependency
    from drkernel.data.build import build_dataset
    from drkernel.env.suite import SuiteError

    out = Path(args.out)
    if out.suffix not in (".parquet", ".jsonl"):
        raise UsageError(f"--out must end in .parquet or .jsonl, got {out.name}")
    try:
        paths = build_dataset(args.suite, out, split_test=args.split_test, seed=args.seed, template=args.template,
                              agent_name=args.agent_name)
    except (SuiteError, MissingDependency, ValueError, KeyError, OSError) as exc:
        raise UsageError(_first_line(exc).strip("'\"")) from None
    for split, path in paths.items():
        print(f"wrote {split}: {path}")
    return 0


def cmd_import_kernelbench(args: argparse.Namespace) -> int:
    from drkernel.data.kernelbench import KernelBenchImportError, import_kernelbench

    try:
        report = import_kernelbench(args.dir, args.out, args.levels, suite_id=args.id, force=args.force)
    except (KernelBenchImportError, OSError) as exc:
        raise UsageError(_first_line(exc)) from None
    per_level = ", ".join(f"level{lv}: {n}" for lv, n in sorted(report.tasks.items()))
    print(f"wrote suite {report.suite_id} to {report.suite_dir}: {report.n_tasks} tasks ({per_level})")
    for line in report.skipped:
        print(f"  skipped {line}", file=sys.stderr)
    return 0


__all__ = ["register", "cmd_bench", "cmd_data_build", "cmd_import_kernelbench"]
