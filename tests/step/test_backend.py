"""The trainer-backend contract (drkernel/step/backend.py): the step's data flow and the verl adapter."""

from __future__ import annotations

import math

import torch

from drkernel.step import (
    DrKernelStepConfig,
    StepBatch,
    TrainerBackend,
    batch_turn_metrics,
    run_training_step,
)
from drkernel.verl.step_adapter import VerlBatchBackend, run_step

CFG = DrKernelStepConfig(mismatch=None, prs=None, target_num_groups=None, samples_per_prompt=2)


class Recorder:
    """A backend that records the calls: 2 trajectories of one prompt, 2 turns of 2 tokens each."""

    def __init__(self, rewards):
        self.calls = []
        self.rewards = torch.tensor(rewards, dtype=torch.float64)

    def rollout(self):
        self.calls.append("rollout")
        return {"ti": torch.tensor([[0, 0, -1, 1, 1]] * 2)}

    def old_log_probs(self, rollout):
        self.calls.append("old_log_probs")
        return torch.full(rollout["ti"].shape, -0.5)

    def step_batch(self, rollout, old_log_probs):
        self.calls.append("step_batch")
        ti = rollout["ti"]
        return StepBatch(response_mask=ti >= 0, old_log_probs=old_log_probs, tok_turn_index=ti,
                         turn_rewards=self.rewards, group_ids=["p", "p"],
                         turn_correct=self.rewards > 0, turn_speedup=self.rewards + 1.0)

    def update(self, rollout, result):
        self.calls.append(("update", result.skipped))
        return {"actor/x": 1.0}

    def save_checkpoint(self, final=False):
        self.calls.append("save")


def test_one_step_calls_the_backend_in_order_and_reports_per_turn_metrics() -> None:
    backend = Recorder([[0.0, 1.0], [0.5, 0.5]])
    assert isinstance(backend, TrainerBackend)
    out = run_training_step(backend, CFG)
    assert backend.calls == ["rollout", "old_log_probs", "step_batch", ("update", False)]
    assert not out.result.skipped and out.update_metrics == {"actor/x": 1.0}
    # turn 1: one of 2 passes (speedup 1.5); turn 2: both pass (2.0 and 1.5)
    assert out.turn_metrics["turn1/correct"] == 0.5 and out.turn_metrics["turn2/correct"] == 1.0
    assert out.turn_metrics["turn2/fast@1.2"] == 1.0 and out.turn_metrics["turn1/reward_mean"] == 0.25
    assert out.metrics["actor/x"] == 1.0 and "trloo/adv_mean" in out.metrics and "turn2/correct" in out.metrics
    assert set(out.seconds) == {"rollout", "logprob", "step_fn", "update"}


def test_a_skipped_step_still_reaches_update() -> None:
    backend = Recorder([[1.0, 1.0], [1.0, 1.0]])  # zero variance: the filter drops the only group
    out = run_training_step(backend, DrKernelStepConfig(mismatch=None, prs=None, target_num_groups=1,
                                                        samples_per_prompt=2))
    assert out.result.skipped and backend.calls[-1] == ("update", True)
    assert out.state.skip_streak == 1 and out.state.buffer.num_rows == 0  # nothing valid to wait for


def test_batch_turn_metrics_without_verdicts_has_rewards_only() -> None:
    ti = torch.tensor([[0, 1], [0, -1]])
    batch = StepBatch(response_mask=ti >= 0, old_log_probs=torch.zeros(2, 2), tok_turn_index=ti,
                      turn_rewards=torch.tensor([[1.0, 2.0], [3.0, 9.0]]), group_ids=["a", "b"])
    m = batch_turn_metrics(batch)
    assert m == {"turn1/reward_mean": 2.0, "turn2/reward_mean": 2.0}  # turn 2 of row 1 has no token


def test_verl_adapter_is_a_backend_without_verl() -> None:
    for name in ("rollout", "old_log_probs", "step_batch", "update", "save_checkpoint"):
        assert callable(getattr(VerlBatchBackend, name))
    saved = []
    backend = VerlBatchBackend({}, [], checkpoint=saved.append)
    assert isinstance(backend, TrainerBackend)
    backend.save_checkpoint(True)
    assert saved == [True]


def test_verl_run_step_writes_zeros_for_dropped_rows_and_hack_rates() -> None:
    # 2 prompts x 2 samples; prompt q has zero variance and is dropped by the filter
    ti = torch.tensor([[0, 0, -1, 1]] * 4)
    data = {"response_mask": (ti >= 0).long(), "old_log_probs": torch.full((4, 4), -0.3),
            "tok_turn_index": ti, "turn_rewards": torch.tensor([[0.0, 1.0], [0.5, 0.2], [1.0, 1.0], [1.0, 1.0]]),
            "turn_exists": torch.ones(4, 2, dtype=torch.bool),
            "turn_correct": torch.tensor([[False, True], [True, True], [True, True], [True, True]]),
            "turn_hacked": torch.tensor([[True, False], [False, False], [False, False], [False, False]]),
            "turn_coverage": torch.ones(4, 2), "turn_speedup": torch.ones(4, 2), "failed": torch.zeros(4, 1).bool()}
    cfg = DrKernelStepConfig(mismatch=None, prs=None, target_num_groups=None, samples_per_prompt=2)
    fields, metrics, _ = run_step(data, ["p", "p", "q", "q"], cfg)
    assert set(fields) == {"advantages", "returns", "response_mask"}
    assert not fields["response_mask"][2:].any() and not fields["advantages"][2:].any()
    assert fields["response_mask"][:2].bool().equal(ti[:2] >= 0)
    torch.testing.assert_close(fields["returns"][0], torch.tensor([1.0, 1.0, 0.0, 1.0]))  # G on the turn's tokens
    assert metrics["drkernel/kernel/turn1/hack_rate"] == 0.25 and metrics["drkernel/filter/num_valid_groups"] == 1.0
    assert math.isclose(metrics["drkernel/kernel/turn1/correct"], 0.75)
