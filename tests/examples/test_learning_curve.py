"""The learning-curve example, shortened: TRLOO on the guessing task must clearly beat chance."""

import json
import sys
from pathlib import Path

import pytest

pytest.importorskip("transformers")
pytest.importorskip("drkernel.step", reason="needs the Dr. Kernel step (drkernel.step, drkernel.losses)")

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_trloo_learns_the_guessing_task(tmp_path):
    sys.path.insert(0, str(REPO / "examples"))
    try:
        import learning_curve
    finally:
        sys.path.pop(0)
    # 60 steps of 8 prompts x 8 samples x 3 turns (~2 CPU minutes). Chance is ~0.04 per turn;
    # the full run (120 steps) ends near 0.6, this one near 0.23.
    summary = learning_curve.run(learning_curve.Args(out=str(tmp_path), steps=60, estimators="trloo",
                                                     progress=False))
    trloo = summary["trloo"]
    rewards = [json.loads(x)["reward/mean"] for x in (tmp_path / "trloo" / "metrics.jsonl").read_text().splitlines()]
    first10, last10 = sum(rewards[:10]) / 10, sum(rewards[-10:]) / 10
    assert trloo["reward_first"] < 0.1  # starts at chance
    assert last10 - first10 >= 0.1, (first10, last10)
    assert trloo["reward_last"] > trloo["reward_first"] + 0.08
    saved = json.loads((tmp_path / "summary.json").read_text())
    assert set(saved) == {"trloo"} and set(saved["trloo"]) >= {"reward_first", "reward_last"}
