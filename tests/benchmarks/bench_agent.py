"""Benchmark: the agent loop's own overhead per turn, beyond generation and grading.

    python tests/benchmarks/bench_agent.py [--episodes 64 --turns 4 --out bench_agent.json]

An instant generator (a fixed ~3 kB reply with a code block, returned at once) and an instant
grader (a fixed passing EvalResult with feedback, returned at once) drive ``run_episodes`` over
many concurrent episodes; the wall time divided by the number of turns is what the loop itself
costs: building the context (trimming on), extracting the code and its span, the reward
(``drkernel.rewards``), the feedback message, the Turn record, the semaphores and the
meaningful-turn mask. Prints the per-turn figure; exits 1 if it exceeds ``--limit-ms`` (5 ms).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import platform
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # run from a checkout

from drkernel.agent.episode import EpisodeConfig, run_episodes  # noqa: E402
from drkernel.agent.types import Generation  # noqa: E402
from drkernel.env.judge.feedback import build_feedback  # noqa: E402
from drkernel.env.result import EvalResult  # noqa: E402
from drkernel.env.tasks.task import Task  # noqa: E402

TASK_SOURCE = "import torch\n\n\nclass Model(torch.nn.Module):\n    def forward(self, x):\n        return torch.relu(x)\n"
KERNEL = '''import torch
import triton
import triton.language as tl


@triton.jit
def _relu(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.maximum(tl.load(x_ptr + offs, mask=mask), 0.0), mask=mask)


class ModelNew(torch.nn.Module):
    def forward(self, x):
        out = torch.empty_like(x)
        _relu[(triton.cdiv(x.numel(), 1024),)](x, out, x.numel(), BLOCK=1024)
        return out
'''
REPLY = "Plan: " + "one elementwise pass, masked tail. " * 60 + "\n\n```python\n" + KERNEL + "```\n"


class InstantGenerate:
    async def __call__(self, messages, **sampling):
        return Generation(text=REPLY, token_ids=list(range(700)), logprobs=[-0.5] * 700, finish_reason="stop")


class InstantGrader:
    capacity = 8

    def __init__(self):
        r = EvalResult(compiled=True, correct=True, speedup=1.7, coverage=0.9, kernel_ms=0.5, reference_ms=0.85)
        r.feedback = build_feedback(r)
        self.result = r

    async def agrade(self, task, source, *, seed=None, options=None):
        return self.result


def measure(episodes: int, turns: int, max_context_tokens: int | None) -> float:
    """Seconds per turn of one run."""
    tasks = [Task.from_source(TASK_SOURCE, name=f"t{i}") for i in range(episodes)]
    config = EpisodeConfig(max_turns=turns, max_context_tokens=max_context_tokens, seed=0)
    t0 = time.perf_counter()
    trs = asyncio.run(run_episodes(tasks, InstantGenerate(), InstantGrader(), config, generation_concurrency=16))
    dt = time.perf_counter() - t0
    n = sum(len(t.turns) for t in trs)
    assert n == episodes * turns and all(not t.failed for t in trs)
    return dt / n


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--episodes", type=int, default=64)
    parser.add_argument("--turns", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=5, help="timed runs (median reported)")
    parser.add_argument("--max-context-tokens", type=int, default=4000, help="trimming budget (0 = off)")
    parser.add_argument("--limit-ms", type=float, default=5.0)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    budget = args.max_context_tokens or None
    measure(4, 2, budget)  # warm-up: imports (torch for the rewards), caches
    runs = [measure(args.episodes, args.turns, budget) for _ in range(args.repeats)]
    ms = 1e3 * statistics.median(runs)
    print(f"agent loop overhead: {ms:.3f} ms/turn (median of {args.repeats} runs of {args.episodes} episodes x "
          f"{args.turns} turns; min {1e3 * min(runs):.3f}, max {1e3 * max(runs):.3f}; limit {args.limit_ms} ms)")
    if args.out:
        args.out.write_text(json.dumps({"ms_per_turn": ms, "runs_ms": [1e3 * r for r in runs],
                                        "episodes": args.episodes, "turns": args.turns,
                                        "python": platform.python_version(), "machine": platform.machine()}, indent=2))
    return 0 if ms < args.limit_ms else 1


if __name__ == "__main__":
    sys.exit(main())
