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
    # 60 steps of 8 prompts x 8 samples x 3 turns (~1-2 CPU minutes). Chance is ~0.04 per turn.
    # The gain (last 10 steps - first 10) depends on the seed: 0.095 0.151 0.155 0.123 0.160 0.143
    # 0.117 0.199 for seeds 0-7 with HFGenerate's per-request random streams (0.116-0.190 with the
    # shared generator before them); seed 1 is a typical run (seed 0 climbs to 0.35 by step 40 and
    # then collapses onto one wrong digit). Static batches: the run is the same every time.
    summary = learning_curve.run(learning_curve.Args(out=str(tmp_path), steps=60, estimators="trloo",
                                                     progress=False, seed=1))
    trloo = summary["trloo"]
    rewards = [json.loads(x)["reward/mean"] for x in (tmp_path / "trloo" / "metrics.jsonl").read_text().splitlines()]
    first10, last10 = sum(rewards[:10]) / 10, sum(rewards[-10:]) / 10
    assert trloo["reward_first"] < 0.1  # starts at chance
    assert last10 - first10 >= 0.1, (first10, last10)
    assert trloo["reward_last"] > trloo["reward_first"] + 0.08
    saved = json.loads((tmp_path / "summary.json").read_text())
    assert set(saved) == {"trloo"} and set(saved["trloo"]) >= {"reward_first", "reward_last"}
