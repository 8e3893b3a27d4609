"""verl batch tensors -> :func:`drkernel.step.dr_kernel_step` -> verl batch tensors (pure torch).

drkernel's trainer (:mod:`drkernel.verl.trainer`) reads these padded fields of one training batch
from TransferQueue, hands them to :func:`run_step` and writes back what it returns. Keeping the
conversion here, free of Ray and TransferQueue, lets the CPU tests drive exactly the code the
trainer runs.

Reads (N rows, L padded response tokens, T = ``drkernel.agent.max_turns``):
``response_mask`` (N, L), ``old_log_probs`` (N, L), ``rollout_log_probs`` (N, L) optional,
``tok_turn_index`` (N, L), ``turn_rewards``, ``turn_exists``, ``turn_correct``, ``turn_hacked``,
``turn_coverage``, ``turn_speedup`` (N, T), ``failed`` (N, 1) and the prompt ids ``uid`` (N).

Writes: ``advantages`` (N, L), ``returns`` (N, L; per-turn returns G on the turn's tokens),
``response_mask`` (N, L; the final loss mask: meaningful turns x MRS x PRS x group filter),
``rollout_is_weights`` (N, L) when truncated IS is on; plus the step's metrics under
``drkernel/`` and per-turn kernel metrics under ``drkernel/kernel/`` (per sample, §9.10d).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch

from drkernel.turns import turn_exists, turns_to_tokens

__all__ = ["STEP_FIELDS", "VerlBatchBackend", "build_step_batch", "run_step"]

STEP_FIELDS = ("response_mask", "old_log_probs", "rollout_log_probs", "tok_turn_index", "turn_rewards",
               "turn_exists", "turn_correct", "turn_hacked", "turn_coverage", "turn_speedup", "failed")
"""The batch fields :func:`run_step` reads (besides ``uid``; ``rollout_log_probs``, ``turn_hacked``,
``turn_speedup`` and ``failed`` may be missing)."""


def build_step_batch(data: Mapping[str, torch.Tensor], uids: Sequence[Any]):
    """The :class:`drkernel.step.StepBatch` of one verl batch (padded tensors)."""
    from drkernel.step import StepBatch

    mask = data["response_mask"].bool()
    ti = data["tok_turn_index"].long()
    ti = torch.where(mask, ti, torch.full_like(ti, -1))  # padding and feedback tokens: no turn
    exists = data["turn_exists"].bool() & turn_exists(ti, mask, data["turn_rewards"].shape[1])
    return StepBatch(
        response_mask=mask,
        old_log_probs=data["old_log_probs"].float(),
        rollout_log_probs=data["rollout_log_probs"].float() if data.get("rollout_log_probs") is not None else None,
        tok_turn_index=ti,
        turn_rewards=data["turn_rewards"].double(),
        group_ids=[str(u) for u in uids],
        turn_exists=exists,
        failed=data["failed"].bool().reshape(-1) if data.get("failed") is not None else None,
        turn_correct=data["turn_correct"].bool(),
        turn_coverage=data["turn_coverage"].double(),
        turn_speedup=data["turn_speedup"].double() if data.get("turn_speedup") is not None else None,
        turn_hacked=data["turn_hacked"].bool() if data.get("turn_hacked") is not None else None,
    )


class VerlBatchBackend:
    """One verl batch as a :class:`drkernel.step.TrainerBackend` (no verl import).

    verl's trainer has already generated the batch (the agent loop's rows in TransferQueue) and
    recomputed ``old_log_probs`` when its advantage stage runs, so ``rollout`` hands back the
    fetched fields, ``old_log_probs`` reads them, and ``update`` writes what verl's actor needs into
    :attr:`fields`: ``advantages``, ``returns`` (per-turn returns G on each turn's tokens), the final
    ``response_mask`` and, with truncated IS, ``rollout_is_weights``. Rows the step drops keep zero
    advantages and an all-zero mask, so verl's actor gives them no loss. Checkpoints are verl's
    (``trainer.save_freq``): ``save_checkpoint`` calls ``checkpoint`` when one was given.
    """

    def __init__(self, data: Mapping[str, torch.Tensor], uids: Sequence[Any], *, gamma: float = 1.0,
                 checkpoint: Callable[[bool], Any] | None = None):
        self.data = data
        self.uids = list(uids)
        self.gamma = float(gamma)
        self.checkpoint = checkpoint
        self.fields: dict[str, torch.Tensor] = {}
        self._batch = None

    def rollout(self) -> Mapping[str, torch.Tensor]:
        return self.data

    def old_log_probs(self, rollout: Mapping[str, torch.Tensor]) -> torch.Tensor:
        return rollout["old_log_probs"].float()

    def step_batch(self, rollout: Mapping[str, torch.Tensor], old_log_probs: torch.Tensor):
        batch = build_step_batch(rollout, self.uids)
        batch.old_log_probs = old_log_probs
        self._batch = batch
        return batch

    def update(self, rollout: Mapping[str, torch.Tensor], result: Any) -> dict[str, float]:
        from drkernel.advantages.returns import discounted_returns

        batch = self._batch if self._batch is not None else build_step_batch(rollout, self.uids)
        n, length = batch.response_mask.shape
        device = batch.response_mask.device
        rows = result.kept_rows - result.num_buffered  # verl's replay buffer does the buffering: num_buffered is 0
        advantages = torch.zeros(n, length, dtype=torch.float32, device=device)
        loss_mask = torch.zeros(n, length, dtype=torch.bool, device=device)
        if not result.skipped and len(rows):
            advantages[rows] = result.tok_advantages.to(torch.float32)
            loss_mask[rows] = result.loss_mask
        turn_mask = batch.turn_exists & ~batch.failed[:, None] if batch.failed is not None else batch.turn_exists
        returns = turns_to_tokens(discounted_returns(batch.turn_rewards, turn_mask, self.gamma),
                                  batch.tok_turn_index).to(torch.float32) * batch.response_mask
        out = {"advantages": advantages, "returns": returns,
               "response_mask": loss_mask.to(rollout["response_mask"].dtype)}
        if result.is_weights is not None:
            weights = torch.zeros(n, length, dtype=torch.float32, device=device)
            if len(rows):
                weights[rows] = result.is_weights.to(torch.float32)
            out["rollout_is_weights"] = weights
        self.fields = out
        return {}

    def save_checkpoint(self, final: bool = False) -> Any:
        return None if self.checkpoint is None else self.checkpoint(final)


def run_step(data: Mapping[str, torch.Tensor], uids: Sequence[Any], config, state=None, *,
             generator: torch.Generator | None = None) -> tuple[dict[str, torch.Tensor], dict[str, float], Any]:
    """One Dr. Kernel step on a verl batch; returns ``(fields to write, metrics, new state)``.

    :func:`drkernel.step.run_training_step` over a :class:`VerlBatchBackend`. Metrics: the step's
    under ``drkernel/``, the per-turn kernel metrics under ``drkernel/kernel/`` (the local trainer
    logs the same per-turn keys without the prefixes).
    """
    from drkernel.step import run_training_step

    backend = VerlBatchBackend(data, uids, gamma=config.gamma)
    outcome = run_training_step(backend, config, state, generator=generator)
    metrics = {f"drkernel/{k}": float(v) for k, v in outcome.step_metrics.items()}
    metrics.update({f"drkernel/kernel/{k}": float(v) for k, v in outcome.turn_metrics.items()})
    return backend.fields, metrics, outcome.state
