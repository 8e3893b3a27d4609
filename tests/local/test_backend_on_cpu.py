"""The local trainer is a TrainerBackend, and its per-turn metrics are the verl path's."""

from __future__ import annotations

import math
import random

import pytest
import torch

pytest.importorskip("drkernel.step")

from drkernel.agent.types import Generation, Trajectory, Turn  # noqa: E402
from drkernel.env.result import EvalResult  # noqa: E402
from drkernel.local.pack import pack_trajectories  # noqa: E402
from drkernel.local.trainer import TrainConfig, Trainer  # noqa: E402
from drkernel.step import TrainerBackend  # noqa: E402
from drkernel.turns import TurnTable, turn_exists, turn_rows  # noqa: E402
from drkernel.verl.step_adapter import run_step  # noqa: E402

PROMPTS, SAMPLES, TURNS = 2, 4, 3


def _trajectories(seed: int) -> list[Trajectory]:
    """PROMPTS x SAMPLES graded episodes over a small vocabulary (ids < 20), token streams that
    extend turn by turn, mixed verdicts (a hack, no-code turns, a short and a failed episode)."""
    rng = random.Random(seed)
    out = []
    for i in range(PROMPTS * SAMPLES):
        stream, turns = [1, 2, 3], []
        for t in range(TURNS if i % 5 else 2):
            reply = [rng.randrange(4, 20) for _ in range(rng.randrange(1, 4))]
            result = None if rng.random() < 0.2 else EvalResult(
                compiled=True, correct=rng.random() < 0.6, hacked=rng.random() < 0.15,
                speedup=rng.choice([0.8, 1.0, 1.25, 2.0]), coverage=rng.choice([0.5, 0.9, 1.0]))
            gen = Generation(text="r", token_ids=reply, logprobs=[-1.0] * len(reply), prompt_token_ids=list(stream),
                             finish_reason="stop")
            turns.append(Turn(index=t, prompt=[], reply="r", code=None, code_span=None, result=result,
                              reward=0.0 if result is None or not result.passed else 0.5 + 0.1 * t, feedback="",
                              generation=gen))
            stream += reply + [2, 3]  # feedback tokens before the next reply
        out.append(Trajectory(f"t{i}", turns=turns, error="boom" if i == 6 else None))
    return out


class FixedEnv:
    """Plays prebuilt trajectories in order."""

    num_turns = TURNS

    def __init__(self, trajectories):
        self.queue = list(trajectories)

    def sample(self, k, rng):
        return list(range(k))

    async def episode(self, item, generate, *, seed, sampling):
        return self.queue.pop(0)

    def close(self):
        pass


class NoGenerate:
    async def __call__(self, messages, **sampling):  # pragma: no cover - the env never generates
        raise AssertionError("not called")


def _trainer(tmp_path, toy_model, trajectories):
    model, tok = toy_model
    cfg = TrainConfig.from_flat(out=str(tmp_path / "run"), env="suite", suite="envs/single_ops", max_steps=1,
                               prompts_per_step=PROMPTS, group_size=SAMPLES, num_turns=TURNS, threads=1, progress=False,
                               tensorboard=False, concurrency=1)
    return Trainer(cfg, model=model, tokenizer=tok, env=FixedEnv(trajectories), generate=lambda m, t: NoGenerate())


def test_local_trainer_satisfies_the_backend_protocol(tmp_path, toy_model) -> None:
    trainer = _trainer(tmp_path, toy_model, [])
    try:
        assert isinstance(trainer, TrainerBackend)
    finally:
        trainer.close()


def _verl_batch(trajectories, old_log_probs):
    """The fields verl's agent loop writes for these episodes (turn table columns; a turn exists
    when it has model tokens in the stream), padded as drkernel's verl trainer reads them."""
    packed = pack_trajectories(trajectories, TURNS, 0)
    table = TurnTable.from_rows([turn_rows(t) for t in trajectories], TURNS, failed=[t.failed for t in trajectories])
    return {
        "response_mask": packed.policy_mask.long(), "old_log_probs": old_log_probs,
        "rollout_log_probs": packed.rollout_log_probs, "tok_turn_index": packed.tok_turn_index,
        "turn_rewards": table.reward.float(), "turn_exists": table.exists & turn_exists(packed.tok_turn_index,
                                                                                        num_turns=TURNS),
        "turn_correct": table.passed, "turn_hacked": table.hacked, "turn_coverage": table.coverage.float(),
        "turn_speedup": table.speedup.float(), "failed": table.failed[:, None],
    }


@pytest.mark.parametrize("seed", [0, 1])
def test_local_and_verl_metrics_agree_on_the_shared_keys(tmp_path, toy_model, seed) -> None:
    trajectories = _trajectories(seed)
    trainer = _trainer(tmp_path, toy_model, trajectories)
    try:
        local = trainer.train_step()
        packed = pack_trajectories(trajectories, TURNS, 0)
        old = trainer.old_log_probs(type("R", (), {"packed": packed})())
    finally:
        trainer.close()
    uids = [f"s1_p{j}" for j in range(PROMPTS) for _ in range(SAMPLES)]
    _, verl, _ = run_step(_verl_batch(trajectories, old), uids, trainer.step_config,
                          generator=torch.Generator().manual_seed(0))
    per_turn = {k[len("drkernel/kernel/"):]: v for k, v in verl.items() if k.startswith("drkernel/kernel/")}
    assert {"turn1/correct", "turn2/fast@1.2", "turn3/hack_rate", "best/fast@1.2", "turn1/reward_mean"} <= set(per_turn)
    assert set(per_turn) <= set(local)  # every per-turn key of the verl path is logged locally too
    for k, v in per_turn.items():
        assert local[k] == pytest.approx(v, nan_ok=True), k
    # the step's reward view agrees too (it depends on the rollout only)
    for k, v in verl.items():
        if k.startswith("drkernel/reward/"):
            assert local[k[len("drkernel/"):]] == pytest.approx(v, nan_ok=True), k
    assert any(local[k] > 0 for k in per_turn if k.endswith("/hack_rate"))
    assert not math.isnan(local["turn1/correct"])
    assert "rollout/failed_frac" in local and "pack/seq_len_max" in local  # local-only metrics stay
