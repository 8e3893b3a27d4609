"""Multi-turn chat SFT data from trajectories (the cold-start recipe).

Each exported line is one dialogue the model really saw, ending on a good reply::

    {"messages": [system?, user (task), assistant, user (feedback), ..., assistant (good reply)],
     "task": "01_relu", "turn": 3, "reward": 1.74, "speedup": 2.1, "turn_rewards": [0.0, 0.0, 1.74]}

The messages are the turn's own prompt (its context after trimming or test-time-scaling selection)
plus its reply, so what a model is trained on matches what it was conditioned on. A turn is
exported when it is graded, passing and its reward is at least ``min_reward``. ``per_trajectory``:
``best`` (default) exports the best such turn of each trajectory, ``all`` every such turn.
``turn_rewards`` gives the rewards of the assistant messages in order, so a trainer can mask the
earlier (failed) attempts out of the loss.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from drkernel.agent.types import Trajectory, Turn


def sft_records(trajectories: Iterable[Trajectory], *, min_reward: float = 0.0,
                per_trajectory: str = "best") -> Iterator[dict[str, Any]]:
    """The SFT records (module doc) of ``trajectories``."""
    if per_trajectory not in ("best", "all"):
        raise ValueError(f"per_trajectory must be 'best' or 'all', got {per_trajectory!r}")
    for tr in trajectories:
        by_index = {t.index: t for t in tr.turns}
        good = [t for t in tr.turns if t.status == "graded" and t.passed and t.reward >= min_reward]
        if per_trajectory == "best" and good:
            good = [max(good, key=lambda t: (t.reward, -t.index))]
        for turn in good:
            yield _record(tr, turn, by_index)


def _record(tr: Trajectory, turn: Turn, by_index: dict[int, Turn]) -> dict[str, Any]:
    messages = [dict(m) for m in turn.prompt] + [turn.assistant_message()]
    # rewards of the assistant messages in the prompt: match them back to their turns by text
    by_reply = {t.reply: t.reward for t in by_index.values()}
    earlier = [by_reply.get(m["content"]) for m in turn.prompt if m["role"] == "assistant"]
    return {"messages": messages, "task": tr.task, "turn": turn.index + 1, "reward": turn.reward,
            "speedup": turn.speedup, "turn_rewards": [*earlier, turn.reward]}


def export_sft(trajectories: Iterable[Trajectory], path: str | os.PathLike, *, min_reward: float = 0.0,
               per_trajectory: str = "best") -> int:
    """Write the SFT records as JSONL to ``path``; returns how many were written."""
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    n = 0
    with out.open("w", encoding="utf-8") as f:
        for rec in sft_records(trajectories, min_reward=min_reward, per_trajectory=per_trajectory):
            f.write(json.dumps(rec, ensure_ascii=False) + "\n")
            n += 1
    return n


__all__ = ["sft_records", "export_sft"]
