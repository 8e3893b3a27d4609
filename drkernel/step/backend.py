"""The trainer-backend contract: what a trainer supplies around :func:`dr_kernel_step`.

Both trainers run the same training step; they differ in who generates, who recomputes
``log pi_old`` and who updates the weights. A backend is any object with the methods of
:class:`TrainerBackend` (structural typing; ``isinstance(obj, TrainerBackend)`` checks that the
methods exist). :func:`run_training_step` is the one step, in this order::

    rollout  = backend.rollout()                          episodes -> the trainer's batch (+ trajectories)
    old_lp   = backend.old_log_probs(rollout)             (N, L) log pi_old with the rollout's weights
    batch    = backend.step_batch(rollout, old_lp)        -> StepBatch (tok_turn_index, turn_* from drkernel.turns)
    result, state = dr_kernel_step(batch, config, state)  masks, MRS, PRS, filter, advantages (drkernel.step)
    turn     = per-turn metrics of the batch              drkernel.metrics.turns.turn_metrics (same keys everywhere)
    update   = backend.update(rollout, result)            policy update (or: hand advantages/mask to the actor)
    backend.save_checkpoint(final) when the trainer's schedule says so

The implementations:

- :class:`drkernel.local.trainer.Trainer` (one process): ``rollout`` plays the episodes and packs
  them (:func:`drkernel.local.pack.pack_trajectories`), ``old_log_probs`` runs the model without
  grad, ``update`` runs the PPO epochs (nothing when the step is skipped), ``save_checkpoint`` writes
  ``checkpoints/step_<k>``.
- :class:`drkernel.verl.step_adapter.VerlBatchBackend` (one verl batch): verl already generated
  (the agent loop's rows in TransferQueue) and recomputed ``old_log_probs``; ``rollout`` hands back
  the fetched fields, ``update`` writes ``advantages``/``returns``/the final ``response_mask`` for
  verl's actor (zeros for dropped rows, also when skipped), ``save_checkpoint`` defers to verl's
  own schedule (``trainer.save_freq``).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

import torch

from drkernel.step.dr_kernel import DrKernelStepConfig, StepBatch, StepResult, StepState, dr_kernel_step

__all__ = ["StepOutcome", "TrainerBackend", "batch_turn_metrics", "run_training_step"]


@runtime_checkable
class TrainerBackend(Protocol):
    """What a trainer supplies around :func:`dr_kernel_step` (module docstring)."""

    def rollout(self) -> Any:
        """Generate (and grade) one batch of episodes; returns the backend's rollout object."""
        ...

    def old_log_probs(self, rollout: Any) -> torch.Tensor:
        """``(N, L)`` log-probs of the rollout's tokens under the current (rollout) weights."""
        ...

    def step_batch(self, rollout: Any, old_log_probs: torch.Tensor) -> StepBatch:
        """The :class:`StepBatch` of the rollout (one row per trajectory)."""
        ...

    def update(self, rollout: Any, result: StepResult) -> dict[str, float]:
        """Apply the step's result (called also when ``result.skipped``); returns metrics."""
        ...

    def save_checkpoint(self, final: bool = False) -> Any:
        """Save the trainer's state (weights, optimizer, step); returns where, or None."""
        ...


@dataclass
class StepOutcome:
    """What :func:`run_training_step` did."""

    rollout: Any
    batch: StepBatch
    result: StepResult
    state: StepState
    step_metrics: dict[str, float]
    """``result.metrics`` (``reward/``, ``mrs/``, ``filter/``, ``trloo/``, ``step/`` ...)."""
    turn_metrics: dict[str, float]
    """Per-turn kernel metrics (``turn{t}/correct``, ``turn{t}/fast@1.2``, ``best/`` ...)."""
    update_metrics: dict[str, float]
    """What ``backend.update`` returned."""
    seconds: dict[str, float] = field(default_factory=dict)
    """Wall time of ``rollout``, ``logprob``, ``step_fn`` and ``update``."""

    @property
    def metrics(self) -> dict[str, float]:
        """All metrics, flat: step, per-turn and update."""
        return {**self.step_metrics, **self.turn_metrics, **self.update_metrics}


def batch_turn_metrics(batch: StepBatch) -> dict[str, float]:
    """Per-turn metrics of a step batch (:func:`drkernel.metrics.turns.turn_metrics` over
    ``turn_correct``, ``turn_speedup``, ``turn_hacked``, ``turn_exists`` and ``turn_rewards``).

    Without verdicts (``turn_correct`` None, e.g. a synthetic task) only ``turn{t}/reward_mean``.
    ``turn_exists`` None = a turn exists iff it has a token in ``response_mask``.
    """
    from drkernel.metrics.turns import turn_metrics
    from drkernel.turns import turn_exists

    rewards = batch.turn_rewards
    exists = batch.turn_exists
    if exists is None:
        exists = turn_exists(batch.tok_turn_index, batch.response_mask, rewards.shape[1])
    exists = torch.as_tensor(exists).bool().cpu()
    rewards = rewards.detach().cpu()
    if batch.turn_correct is None:
        out = turn_metrics(correct=torch.zeros_like(exists), speedup=torch.full(exists.shape, float("nan")),
                           exists=exists, turn_rewards=rewards)
        return {k: v for k, v in out.items() if k.endswith("/reward_mean")}
    correct = torch.as_tensor(batch.turn_correct).bool().cpu()
    speedup = (torch.full(correct.shape, float("nan")) if batch.turn_speedup is None
               else batch.turn_speedup.detach().cpu())
    hacked = None if batch.turn_hacked is None else torch.as_tensor(batch.turn_hacked).bool().cpu()
    return turn_metrics(correct=correct, speedup=speedup, hacked=hacked, exists=exists, turn_rewards=rewards)


def run_training_step(
    backend: TrainerBackend,
    config: DrKernelStepConfig | None = None,
    state: StepState | None = None,
    *,
    generator: torch.Generator | None = None,
) -> StepOutcome:
    """One training step through ``backend`` (module docstring); returns what happened.

    ``backend.update`` is called also for a skipped step (a backend that writes results for
    another trainer must write zeros then); a backend that trains itself checks
    ``result.skipped``. Checkpointing is the caller's (its schedule).
    """
    t0 = time.perf_counter()
    rollout = backend.rollout()
    t1 = time.perf_counter()
    old = backend.old_log_probs(rollout)
    t2 = time.perf_counter()
    batch = backend.step_batch(rollout, old)
    result, new_state = dr_kernel_step(batch, config, state, generator=generator)
    turn = batch_turn_metrics(batch)
    t3 = time.perf_counter()
    update = backend.update(rollout, result)
    t4 = time.perf_counter()
    return StepOutcome(rollout=rollout, batch=batch, result=result, state=new_state,
                       step_metrics=dict(result.metrics), turn_metrics=turn, update_metrics=dict(update),
                       seconds={"rollout": t1 - t0, "logprob": t2 - t1, "step_fn": t3 - t2, "update": t4 - t3})
