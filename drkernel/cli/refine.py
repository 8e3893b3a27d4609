"""``drkernel refine`` (also ``python examples/refine_loop.py``): sequential test-time scaling from the shell.

    python examples/refine_loop.py --base-url http://localhost:8000/v1 --model Qwen/Qwen3-8B \\
        --suite envs/single_ops --max-turns 5 --iterations 10 --remain-turns 4 --select best --out runs/tts

Writes the resumable output directory of :mod:`drkernel.agent.scaling` (rerun the same command to
continue a killed run), prints a per-turn table, and optionally exports SFT data (``--sft-out``).

Before anything is written, the endpoint of ``--base-url`` is asked for its model list: a server that
does not answer exits 3 with one line naming the URL, and leaves no output directory behind.

Exit codes (:mod:`drkernel.cli.common`): 0 when every task ran all its turns; 1 when some task
stopped early (the generation server failed after its retries, or the grader broke): what finished
is kept, rerun to continue; 2 for unusable input; 3 when the endpoint does not answer at the start.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from typing import Any

from drkernel.cli.common import MissingExtra, ServiceUnavailable, UsageError, load_suite_arg, select_tasks_arg

PROG = "drkernel refine"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Register the ``refine`` options on ``parser``."""
    g = parser.add_argument_group("model (one of)")
    g.add_argument("--base-url", help="OpenAI-compatible endpoint, e.g. http://localhost:8000/v1 (vllm serve)")
    g.add_argument("--model", help="model name on the server (required with --base-url)")
    g.add_argument("--api-key", default=None, help="API key (default: $OPENAI_API_KEY, else 'EMPTY')")
    g.add_argument("--hf-model", metavar="PATH", help="local Hugging Face model directory (drkernel.local.hf_generate)")
    g = parser.add_argument_group("tasks (one of)")
    g.add_argument("--suite", metavar="DIR", help="task suite directory, e.g. envs/single_ops")
    g.add_argument("--task", metavar="FILE", action="append", help="KernelBench-format task file (repeatable)")
    g.add_argument("--tasks", metavar="PATTERN", help="with --suite: comma-separated id globs/substrings")
    g = parser.add_argument_group("test-time scaling")
    g.add_argument("--max-turns", type=int, default=3, help="M: turns per iteration (default 3)")
    g.add_argument("--iterations", type=int, default=1, help="I: iterations (default 1)")
    g.add_argument("--remain-turns", type=int, default=0, help="R: turns kept as context between iterations")
    g.add_argument("--select", choices=["last", "best"], default="last", help="which R turns to keep")
    g = parser.add_argument_group("run")
    g.add_argument("--concurrency", type=int, default=8, help="generation requests in flight (default 8)")
    g.add_argument("--grade-workers", type=int, default=None,
                   help="kernels graded at once (default: GPUs on cuda, min(4, CPUs) on cpu)")
    g.add_argument("--device", choices=["auto", "cpu", "cuda"], default="auto",
                   help="grading (and --hf-model) device; cpu runs Triton's interpreter")
    g.add_argument("--out", required=True, metavar="DIR", help="output directory (resumable)")
    g.add_argument("--overwrite", action="store_true", help="start over in an existing --out")
    g.add_argument("--seed", type=int, default=None, help="fix the graders' hidden input seeds")
    g.add_argument("--no-timing", action="store_true", help="grade correctness and hacks only (no speedups)")
    g.add_argument("--no-profile", action="store_true", help="skip the coverage profile")
    g.add_argument("--no-progress", action="store_true", help="no progress bar")
    g.add_argument("--no-plot", action="store_true", help="no summary.png")
    g = parser.add_argument_group("generation")
    g.add_argument("--temperature", type=float, default=None, help="sampling temperature (default: the server's)")
    g.add_argument("--top-p", type=float, default=None, help="nucleus sampling top-p (default: the server's)")
    g.add_argument("--max-tokens", type=int, default=None, help="reply token limit")
    g.add_argument("--timeout", type=float, default=600.0, help="seconds per request (default 600)")
    g.add_argument("--max-retries", type=int, default=3, help="request retries before failing (default 3)")
    g.add_argument("--max-context-tokens", type=int, default=None,
                   help="trim the dialogue to this many tokens (first prompt + latest turns that fit)")
    g.add_argument("--tokenizer", metavar="PATH", help="count context tokens with this HF tokenizer")
    g.add_argument("--system-prompt", default=None, help="system message before the first prompt")
    g = parser.add_argument_group("SFT export")
    g.add_argument("--sft-out", metavar="FILE", help="write multi-turn chat SFT data (JSONL) here")
    g.add_argument("--sft-min-reward", type=float, default=1.0, help="export passing turns with reward >= this")
    g.add_argument("--sft-all", action="store_true", help="export every good turn, not only each task's best")


def _load_tasks(args: argparse.Namespace) -> tuple[list[Any], Any, str]:
    """(tasks, suite or None, prompt template)."""
    from drkernel.env.tasks.task import Task, TaskError

    if bool(args.suite) == bool(args.task):
        raise UsageError("give exactly one of --suite DIR or --task FILE")
    if args.suite:
        suite = load_suite_arg(args.suite)
        chosen = select_tasks_arg(suite, args.tasks)
        return [t.task(suite.entry_point) for t in chosen], suite, suite.prompt_template
    if args.tasks:
        raise UsageError("--tasks needs --suite (it selects tasks of a suite)")
    try:
        return [Task.from_file(p) for p in args.task], None, "triton_kernelbench"
    except TaskError as exc:
        raise UsageError(str(exc)) from None


def _device(name: str) -> str:
    if name != "auto":
        return name
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def _grader(args: argparse.Namespace, suite: Any, device: str) -> Any:
    from drkernel.env.config import EvalConfig, cpu_fast
    from drkernel.env.grader import LocalGrader

    overrides = {"measure_performance": False if args.no_timing else None, "profile": False if args.no_profile else None}
    if suite is not None:
        config = suite.eval_config(device, **overrides)
    else:
        config = EvalConfig(device=device)
        config = cpu_fast(config) if device == "cpu" else config
        kept = {k: v for k, v in overrides.items() if v is not None}
        config = config.with_overrides(**kept) if kept else config
    workers = args.grade_workers
    if workers is None:
        if device.startswith("cuda"):
            import torch

            workers = max(1, torch.cuda.device_count())
        else:
            workers = max(1, min(4, os.cpu_count() or 1))
    return LocalGrader(config, capacity=workers)


def _sampling(args: argparse.Namespace) -> dict[str, Any]:
    s = {"temperature": args.temperature, "top_p": args.top_p, "max_tokens": args.max_tokens}
    return {k: v for k, v in s.items() if v is not None}


def _generate(args: argparse.Namespace, device: str) -> tuple[Any, Any]:
    """(generate backend, tokenizer or None)."""
    if bool(args.base_url) == bool(args.hf_model):
        raise UsageError("give exactly one of --base-url URL (with --model) or --hf-model PATH")
    if args.base_url:
        if not args.model:
            raise UsageError("--base-url needs --model NAME")
        from drkernel.agent.openai_backend import EndpointUnavailable, OpenAIGenerate

        generate = OpenAIGenerate(args.base_url, args.model, api_key=args.api_key, timeout=args.timeout,
                                  max_retries=args.max_retries)
        try:  # before anything is written: a dead endpoint leaves no empty run behind
            generate.probe(timeout=min(10.0, args.timeout))
        except EndpointUnavailable as exc:
            raise ServiceUnavailable(f"the model endpoint {generate.base_url} does not answer ({exc.reason}); "
                                     f"start the server (e.g. `vllm serve MODEL`) or fix --base-url") from None
        except PermissionError as exc:
            raise UsageError(f"the model endpoint {generate.base_url} refused the API key ({exc}): "
                             f"set --api-key or $OPENAI_API_KEY") from None
        return generate, None
    if not os.path.isdir(args.hf_model):
        raise UsageError(f"--hf-model: not a model directory: {args.hf_model}")
    try:
        from drkernel.local.hf_generate import HFGenerate
    except ModuleNotFoundError as exc:
        raise MissingExtra("local", "--hf-model", exc.name) from None
    gen = HFGenerate(args.hf_model, device=device)
    return gen, getattr(gen, "tokenizer", None)


def main(args: argparse.Namespace) -> int:
    """Run ``refine`` with parsed ``args``; returns the exit code or raises the errors of
    :mod:`drkernel.cli.common` (module doc)."""
    from drkernel.agent.context import approx_tokens, tokenizer_counter
    from drkernel.agent.episode import EpisodeConfig
    from drkernel.agent.scaling import ScalingConfig, format_table, refine
    from drkernel.agent.sft import export_sft

    if args.concurrency < 1:
        raise UsageError("--concurrency must be >= 1")
    try:
        scaling = ScalingConfig(max_turns=args.max_turns, iterations=args.iterations,
                                remain_turns=args.remain_turns, select=args.select)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    tasks, suite, template = _load_tasks(args)
    device = _device(args.device)
    generate, tokenizer = _generate(args, device)
    if args.tokenizer:
        try:
            from transformers import AutoTokenizer
        except ModuleNotFoundError as exc:
            raise MissingExtra("local", "--tokenizer", exc.name) from None
        tokenizer = AutoTokenizer.from_pretrained(args.tokenizer)
    count = tokenizer_counter(tokenizer) if tokenizer is not None else approx_tokens
    sampling = _sampling(args)
    episode = EpisodeConfig(max_turns=args.max_turns, prompt_template=template, system_prompt=args.system_prompt,
                            max_context_tokens=args.max_context_tokens, reserve_tokens=args.max_tokens or 0,
                            sampling=sampling, seed=args.seed)
    settings = {"model": args.model or os.path.abspath(args.hf_model), "base_url": args.base_url,
                "suite": suite.id if suite is not None else None, "device": device, "sampling": sampling,
                "tasks": [t.name for t in tasks]}
    grader = _grader(args, suite, device)
    try:
        report = asyncio.run(refine(tasks, generate, grader, episode, scaling, args.out,
                                    generation_concurrency=args.concurrency, count_tokens=count,
                                    settings=settings, overwrite=args.overwrite, progress=not args.no_progress,
                                    plot=not args.no_plot))
    except ValueError as exc:  # run.json of another run
        raise UsageError(str(exc)) from None
    finally:
        grader.close()
    print(format_table(report.summary))
    b = report.summary["best"]
    print(f"best over {scaling.total_turns} turns: {b['correct_rate'] or 0:.1%} correct, "
          f"fast@1.2 {b['fast@1.2'] or 0:.1%} ({len(tasks)} tasks; {report.replayed_turns} turns resumed); "
          f"results in {args.out}")
    if args.sft_out:
        n = export_sft(report.trajectories, args.sft_out, min_reward=args.sft_min_reward,
                       per_trajectory="all" if args.sft_all else "best")
        print(f"SFT: {n} dialogues -> {args.sft_out}")
    if report.errors:
        for task, err in sorted(report.errors.items()):
            print(f"{PROG}: {task}: {err}", file=sys.stderr)
        print(f"{PROG}: error: {len(report.errors)} task(s) stopped early; finished turns are kept in "
              f"{args.out}; rerun the same command to continue", file=sys.stderr)
        return 1
    return 0


def build_parser(prog: str = PROG) -> argparse.ArgumentParser:
    """A standalone parser of the ``refine`` options (``examples/refine_loop.py``)."""
    parser = argparse.ArgumentParser(prog=prog, description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    add_arguments(parser)
    return parser


def run(argv: list[str] | None = None, prog: str = PROG) -> int:
    """Parse ``argv`` and run under the error convention (what ``examples/refine_loop.py`` calls)."""
    from drkernel.cli.common import run_command

    return run_command(prog, main, build_parser(prog).parse_args(argv))


__all__ = ["add_arguments", "main", "build_parser", "run"]
