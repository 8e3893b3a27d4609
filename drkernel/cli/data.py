"""``drkernel data build`` (one verl RLHFDataset row per task) and ``drkernel data import-kernelbench``.

Exit codes (:mod:`drkernel.cli.common`): 0 when the files were written, 2 with one line for unusable
input (missing suite, an output path that cannot be written, missing pyarrow, not a KernelBench
checkout). The output path is checked before the rows are built.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from drkernel.cli.common import UsageError, first_line, load_suite_arg


def add_arguments(p: argparse.ArgumentParser) -> None:
    dsub = p.add_subparsers(dest="data_command", required=True, metavar="DATA_COMMAND")
    b = dsub.add_parser("build", help="one verl RLHFDataset row per task (parquet, or JSONL for *.jsonl)")
    b.add_argument("--suite", required=True, help="suite directory, e.g. envs/single_ops")
    b.add_argument("--out", required=True, help="output file: *.parquet or *.jsonl")
    b.add_argument("--split-test", type=int, default=0, metavar="N",
                   help="put N random tasks in <out stem>_test<suffix> instead")
    b.add_argument("--seed", type=int, default=0, help="seed of the test split")
    b.add_argument("--template", default=None, help="prompt template (default: the suite's prompt_template)")
    b.add_argument("--agent-name", default=None, help="add verl's per-row agent_name column with this value")
    b.set_defaults(data_func=build)

    k = dsub.add_parser("import-kernelbench", help="turn a local KernelBench checkout into a suite directory")
    k.add_argument("dir", help="KernelBench checkout (holding KernelBench/level1/ or level1/)")
    k.add_argument("--out", required=True, help="suite directory to create, e.g. envs/kernelbench")
    k.add_argument("--levels", type=int, nargs="+", default=None, help="levels to import (default: 1 2 3 if present)")
    k.add_argument("--id", default=None, help="suite id (default: <out dir name>-v0)")
    k.add_argument("--force", action="store_true", help="replace the tasks of an existing suite directory")
    k.set_defaults(data_func=import_kernelbench)


def main(args: argparse.Namespace) -> int:
    return args.data_func(args)


def check_output_file(out: Path, flag: str = "--out") -> None:
    """:class:`UsageError` unless ``out`` can be created as a file: not a directory, no file among its
    parents, its first existing parent writable."""
    if out.is_dir():
        raise UsageError(f"{flag} {out}: is a directory; give a file name (e.g. {out / 'train.parquet'})")
    parent = out.parent
    while not parent.exists() and parent != parent.parent:
        parent = parent.parent
    if not parent.is_dir():
        raise UsageError(f"{flag} {out}: cannot create it: {parent} is a file, not a directory")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise UsageError(f"{flag} {out}: cannot create it: no write permission in {parent}")


def build(args: argparse.Namespace) -> int:
    """``data build``: write the dataset file(s) and say where."""
    from drkernel.data._deps import MissingDependency
    from drkernel.data.build import build_dataset
    from drkernel.env.tasks.suite import SuiteError

    out = Path(args.out)
    if out.suffix not in (".parquet", ".jsonl"):
        raise UsageError(f"--out must end in .parquet or .jsonl, got {out.name}")
    check_output_file(out)
    load_suite_arg(args.suite)  # an unknown suite names the ones that exist
    try:
        paths = build_dataset(args.suite, out, split_test=args.split_test, seed=args.seed, template=args.template,
                              agent_name=args.agent_name)
    except OSError as exc:
        raise UsageError(f"--out {out}: cannot write it: {exc.strerror or first_line(exc)}") from None
    except (SuiteError, MissingDependency, ValueError, KeyError) as exc:
        raise UsageError(first_line(exc).strip("'\"")) from None
    for split, path in paths.items():
        print(f"wrote {split}: {path}")
    return 0


def import_kernelbench(args: argparse.Namespace) -> int:
    """``data import-kernelbench``: write the suite directory and report what was imported or skipped."""
    from drkernel.data.kernelbench import KernelBenchImportError
    from drkernel.data.kernelbench import import_kernelbench as run_import

    try:
        report = run_import(args.dir, args.out, args.levels, suite_id=args.id, force=args.force)
    except (KernelBenchImportError, OSError) as exc:
        raise UsageError(first_line(exc)) from None
    per_level = ", ".join(f"level{lv}: {n}" for lv, n in sorted(report.tasks.items()))
    print(f"wrote suite {report.suite_id} to {report.suite_dir}: {report.n_tasks} tasks ({per_level})")
    for line in report.skipped:
        print(f"  skipped {line}", file=sys.stderr)
    return 0


__all__ = ["add_arguments", "main", "build", "import_kernelbench"]
