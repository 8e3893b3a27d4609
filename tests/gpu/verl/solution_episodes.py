"""The SFT chain's data: the drkernel agent plays a suite's tasks for two turns with a scripted
policy, and its SFT export becomes the parquet verl's SFT trainer reads.

    python tests/gpu/verl/solution_episodes.py --suite envs/single_ops --out DIR [--tasks 16] [--device cuda]

Turn 1 answers with the reference itself renamed ``ModelNew`` (no Triton kernel: the grader says so
in its feedback), turn 2 with the suite's bundled solution, both worded as
``drkernel.agent.extract.kernel_reply``. Every turn is graded for real
(``LocalGrader``); ``drkernel.agent.sft.export_sft`` keeps each episode's best passing turn with
the dialogue before it (user, assistant, feedback, assistant), ``drkernel.verl.sft_data`` writes
the parquet. Writes ``DIR/sft.jsonl`` and ``DIR/sft.parquet``; prints the counts and the rewards.
"""

from __future__ import annotations

import argparse
import asyncio
import re
import sys
import time
from pathlib import Path


def first_reply(reference: str) -> str:
    """Turn 1: the reference as the candidate (``Model`` renamed ``ModelNew``; no kernel)."""
    from drkernel.agent.extract import kernel_reply

    return kernel_reply(re.sub(r"\bModel\b", "ModelNew", reference))


async def play(suite_dir: str, n_tasks: int, device: str):
    from drkernel.agent import EpisodeConfig, Generation, run_episode
    from drkernel.agent.extract import kernel_reply
    from drkernel.env import LocalGrader, load_suite

    suite = load_suite(suite_dir)
    chosen = [t for t in suite.tasks if t.solution is not None][:n_tasks]
    grader = LocalGrader(suite.eval_config(device), capacity=8)
    config = EpisodeConfig(max_turns=2, prompt_template=suite.prompt_template)

    async def episode(st):
        task = st.task(suite.entry_point)
        reference, solution = Path(st.path).read_text(), Path(st.solution).read_text()

        async def generate(messages, **_):
            turn = sum(m["role"] == "assistant" for m in messages)
            return Generation(text=first_reply(reference) if turn == 0 else kernel_reply(solution))

        return await run_episode(task, generate, grader, config)

    try:
        return await asyncio.gather(*(episode(st) for st in chosen))
    finally:
        grader.close()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--suite", default="envs/single_ops")
    ap.add_argument("--out", required=True)
    ap.add_argument("--tasks", type=int, default=16, help="tasks to play (those with a bundled solution)")
    ap.add_argument("--device", default="cuda")
    args = ap.parse_args(argv)

    from drkernel.agent.sft import export_sft
    from drkernel.verl.sft_data import jsonl_to_parquet

    t0 = time.perf_counter()
    trajectories = asyncio.run(play(args.suite, args.tasks, args.device))
    out = Path(args.out)
    n = export_sft(trajectories, out / "sft.jsonl", min_reward=0.0)
    rows = jsonl_to_parquet(out / "sft.jsonl", out / "sft.parquet")
    rewards = [[round(t.reward, 3) for t in tr.turns] for tr in trajectories]
    print(f"solution_episodes: {len(trajectories)} episodes of 2 turns graded on {args.device} in "
          f"{time.perf_counter() - t0:.0f} s; turn rewards {rewards}; {n} SFT records, {rows} parquet rows")
    return 0 if n == len(trajectories) else 1


if __name__ == "__main__":
    sys.exit(main())
