"""``drkernel`` command line.

Subcommands:
  eval-kernel   grade one candidate against one task (design brief contract)
  bench         grade a directory of candidates against a suite
  data          build training data from a suite / import KernelBench

Exit codes: 0 whenever an evaluation ran, whatever its verdict; 2 with a one-line reason on
stderr for unusable input (missing file, unreadable task); 3 when the environment itself failed
(no GPU when one was asked for, worker could not start).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Sequence


class UsageError(Exception):
    """Unusable input: reported as one line on stderr, exit code 2."""


def _add_eval_kernel(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("eval-kernel", help="grade one candidate ModelNew against a KernelBench-format task")
    p.add_argument("--task", required=True, help="reference file (Model, get_inputs, get_init_inputs)")
    p.add_argument("--candidate", required=True, help="candidate file defining ModelNew")
    p.add_argument("--device", default=None, choices=["cpu", "cuda"],
                   help="cpu: Triton interpreter (timings are CPU timings); default: cuda if available")
    p.add_argument("--json", action="store_true", help="print the result as JSON instead of feedback text")
    p.add_argument("--seed", type=int, default=None, help="fix every hidden seed (reproducible evaluation)")
    p.add_argument("--size", default=None, choices=["full", "small"], help="task size knob (DRKERNEL_TASK_SIZE)")
    p.add_argument("--trials", type=int, default=None, help="timed calls per model")
    p.add_argument("--reference-backend", default=None, choices=["eager", "torch_compile"])
    p.add_argument("--no-timing", action="store_true", help="correctness and hack checks only")
    p.set_defaults(func=cmd_eval_kernel)


def _default_device() -> str:
    try:
        import torch

        return "cuda" if torch.cuda.is_available() else "cpu"
    except ImportError:  # pragma: no cover
        return "cpu"


def cmd_eval_kernel(args: argparse.Namespace) -> int:
    from drkernel.env.config import EvalConfig, cpu_fast
    from drkernel.env.evaluation import evaluate
    from drkernel.env.task import Task, TaskError

    task_path, cand_path = Path(args.task), Path(args.candidate)
    if not task_path.is_file():
        raise UsageError(f"task file not found: {task_path}")
    if not cand_path.is_file():
        raise UsageError(f"candidate file not found: {cand_path}")
    try:
        candidate = cand_path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"cannot read candidate file {cand_path}: {exc}") from None
    device = args.device or _default_device()
    config = EvalConfig(device=device)
    if device == "cpu":
        config = cpu_fast(config)
    overrides = {"task_size": args.size, "timing_trials": args.trials, "reference_backend": args.reference_backend}
    config = config.with_overrides(**{k: v for k, v in overrides.items() if v is not None})
    if args.no_timing:
        config = config.with_overrides(measure_performance=False, profile=False)
    try:
        task = Task.from_file(task_path)
        task.load(config.resolved_task_size())  # fail fast on an unusable task: exit 2
        result = evaluate(task, candidate, seed=args.seed, config=config.validate())
    except TaskError as exc:
        raise UsageError(str(exc).splitlines()[0]) from None
    if args.json:
        print(result.to_json(indent=2))
    else:
        verdict = "PASS" if result.passed else "FAIL"
        print(f"{verdict}  compiled={result.compiled} correct={result.correct} hacked={result.hacked}"
              + (f" reasons={','.join(result.hack_reasons)}" if result.hack_reasons else ""))
        print(result.feedback)
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="drkernel", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    _add_eval_kernel(sub)
    from drkernel import bench_cli

    bench_cli.register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    from drkernel.env.result import EnvironmentFailure

    try:
        return int(args.func(args) or 0)
    except UsageError as exc:
        print(f"drkernel: error: {exc}", file=sys.stderr)
        return 2
    except EnvironmentFailure as exc:
        print(f"drkernel: environment failure: {str(exc).splitlines()[0]}", file=sys.stderr)
        return 3
    except BrokenPipeError:  # pragma: no cover
        return 0


if __name__ == "__main__":
    sys.exit(main())


__all__ = ["main", "build_parser"]
