"""``drkernel eval-kernel --task REF.py --candidate CAND.py``: grade one candidate (design brief contract).

Exit codes (:mod:`drkernel.cli.common`): 0 whenever the evaluation ran, whatever the verdict (the
verdict is the output); 2 with one line on stderr for unusable input (a missing or unreadable file,
a task that cannot be loaded); 3 when the environment failed.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from drkernel.cli.common import UsageError, default_device, first_line
from drkernel.env.config import PRECISION_POLICIES as PRECISION_CHOICES


def add_arguments(p: argparse.ArgumentParser) -> None:
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
    p.add_argument("--precision", default=None, choices=PRECISION_CHOICES,
                   help="how float outputs are judged (default: the task's PRECISION, else 'reference': against a "
                        "float64 oracle, as accurate as the reference; 'kernelbench': allclose 1e-2, for "
                        "comparing with published numbers)")


def _read_candidate(path: Path) -> str:
    if not path.is_file():
        raise UsageError(f"candidate file not found: {path}")
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"cannot read candidate file {path}: {exc}") from None


def main(args: argparse.Namespace) -> int:
    task_path = Path(args.task)  # unusable input is reported before torch is imported
    if not task_path.is_file():
        raise UsageError(f"task file not found: {task_path}")
    source = _read_candidate(Path(args.candidate))

    from drkernel.env import EvalConfig, Task, TaskError, evaluate
    from drkernel.env.config import cpu_fast

    device = args.device or default_device()
    config = EvalConfig(device=device)
    if device == "cpu":
        config = cpu_fast(config)
    overrides = {"task_size": args.size, "timing_trials": args.trials, "reference_backend": args.reference_backend,
                 "precision": args.precision}
    config = config.with_overrides(**{k: v for k, v in overrides.items() if v is not None})
    if args.no_timing:
        config = config.with_overrides(measure_performance=False, profile=False)
    try:
        task = Task.from_file(task_path)
        task.load(config.resolved_task_size())  # fail fast on an unusable task: exit 2
        result = evaluate(task, source, seed=args.seed, config=config.validate())
    except TaskError as exc:
        raise UsageError(first_line(exc)) from None
    if args.json:
        print(result.to_json(indent=2))
    else:
        verdict = "PASS" if result.passed else "FAIL"
        print(f"{verdict}  compiled={result.compiled} correct={result.correct} hacked={result.hacked}"
              + (f" reasons={','.join(result.hack_reasons)}" if result.hack_reasons else ""))
        print(result.feedback)
    return 0


__all__ = ["add_arguments", "main"]
