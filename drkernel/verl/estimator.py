"""The ``trloo`` advantage estimator, registered with verl's ``compute_advantage``.

verl calls a registered estimator as ``fn(token_level_rewards, response_mask, config=<algorithm
node>, index=<uid per row>)`` and expects ``(advantages, returns)``, both ``(N, L)``. It passes no
turn structure, so this adapter recovers it from the token layout:

- per-turn rewards r_{i,t}: drkernel's agent loop writes each turn's reward on that turn's last
  model token of ``rm_scores`` (``token_level_rewards`` unless a KL penalty is added); r_{i,t} is
  the sum of the token rewards of turn t;
- the per-token turn index: ``tok_turn_index`` when the caller has it (drkernel's trainer), else
  the maximal runs of 1 in ``response_mask`` (each turn's model tokens are contiguous and the
  environment's feedback tokens, mask 0, separate them).

Recovering turns from the mask assumes nothing zeroed tokens inside a turn. verl's token-level
rollout rejection does; a row it rejects entirely simply drops out of the groups. The shipped
config turns verl's rollout correction off and runs MRS in drkernel's trainer instead, which reads
``tok_turn_index`` and keeps rejected rows in their peers' baselines (as Dr. Kernel does).

The advantages come from the shared :func:`drkernel.step.dr_kernel_step` with everything but the
estimator switched off (no MRS, PRS or group filter: in a stock verl trainer those are verl's own
stages, or drkernel's trainer runs the full step instead of this function), so for the same
tokens verl and drkernel's local trainer compute the same TRLOO::

    G_{i,t} = sum_{k >= t} gamma^(k-t) r_{i,k}
    A_{i,t} = G_{i,t} - mean_{j in S, j != i} G_{j,t}     (|S| > 1; A = G when |S| = 1)

with S = rows of the same uid that have a turn t. Every token of turn t gets A_{i,t}; ``returns``
are G_{i,t} on the same tokens. ``gamma`` is ``algorithm.gamma``.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from drkernel.turns import tokens_to_turns, turn_exists, turn_index_from_mask, turns_to_tokens

__all__ = ["ESTIMATOR_NAME", "trloo_token_advantages", "compute_trloo_advantage", "register"]

ESTIMATOR_NAME = "trloo"


def _group_ids(index: Any, n: int) -> list[Any]:
    if index is None:
        return list(range(n))  # no uid: each row is its own group (baseline 0)
    ids = index.tolist() if isinstance(index, (np.ndarray, torch.Tensor)) else list(index)
    if len(ids) != n:
        raise ValueError(f"index has {len(ids)} entries for {n} rows")
    return [str(i) for i in ids]


def trloo_token_advantages(
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    group_ids: Any = None,
    gamma: float = 1.0,
    tok_turn_index: torch.Tensor | None = None,
    estimator: str = "trloo",
) -> tuple[torch.Tensor, torch.Tensor]:
    """Token-level ``(advantages, returns)`` through :func:`drkernel.step.dr_kernel_step`.

    Args:
        token_level_rewards: ``(N, L)`` float, turn rewards on turn-end tokens.
        response_mask: ``(N, L)`` 0/1, the policy's tokens.
        group_ids: length-N prompt ids (verl's ``uid``); None = every row alone.
        gamma: discount across turns.
        tok_turn_index: ``(N, L)`` int, 0-based turn per model token (-1 elsewhere); None = the
            runs of ``response_mask``.
        estimator: drkernel estimator name (registry of :mod:`drkernel.advantages`).

    Returns:
        ``(advantages, returns)``, each ``(N, L)`` float32, 0 outside ``response_mask``.
    """
    from drkernel.advantages.returns import discounted_returns
    from drkernel.step import DrKernelStepConfig, StepBatch, dr_kernel_step

    mask = response_mask.bool()
    n = mask.shape[0]
    ti = turn_index_from_mask(mask) if tok_turn_index is None else tok_turn_index.long().to(mask.device)
    ti = torch.where(mask, ti, torch.full_like(ti, -1))
    num_turns = int(ti.max()) + 1 if ti.numel() and bool(mask.any()) else 1
    # A reward on a token outside the mask belongs to no recoverable turn (e.g. verl's own rollout
    # rejection zeroed the whole row): that row then has no turn, so it joins no group.
    tok_rewards = torch.where(ti >= 0, token_level_rewards.double(), torch.zeros((), dtype=torch.float64))
    rewards = tokens_to_turns(tok_rewards, ti, num_turns)
    cfg = DrKernelStepConfig(estimator=estimator, gamma=float(gamma), mask_void_turn=False, mismatch=None,
                             prs=None, group_filter=False, target_num_groups=None, samples_per_prompt=None)
    result, _ = dr_kernel_step(
        StepBatch(response_mask=mask, old_log_probs=torch.zeros(mask.shape, dtype=torch.float32, device=mask.device),
                  tok_turn_index=ti, turn_rewards=rewards, group_ids=_group_ids(group_ids, n)),
        cfg,
    )
    advantages = torch.zeros(mask.shape, dtype=torch.float32, device=mask.device)
    advantages[result.kept_rows] = result.tok_advantages.to(torch.float32)  # dead rows stay 0
    exists = turn_exists(ti, mask, num_turns)  # turn t exists iff it has a model token
    returns = turns_to_tokens(discounted_returns(rewards, exists, float(gamma)), ti).to(torch.float32)
    return advantages, returns * mask


def compute_trloo_advantage(
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    index: Any = None,
    config: Any = None,
    **kwargs: Any,
) -> tuple[torch.Tensor, torch.Tensor]:
    """verl's estimator signature (``core_algos.register_adv_est``); see the module docstring.

    Reads ``gamma`` from ``config`` (verl's ``algorithm`` node; default 1.0) and an optional
    ``tok_turn_index`` keyword. Other keywords verl may add (``reward_baselines``) are ignored.
    """
    gamma = 1.0 if config is None else float(config.get("gamma", 1.0))
    return trloo_token_advantages(token_level_rewards, response_mask, index, gamma,
                                  tok_turn_index=kwargs.get("tok_turn_index"))


def register() -> None:
    """Register :func:`compute_trloo_advantage` as verl's ``trloo`` (idempotent)."""
    from verl.trainer.ppo import core_algos

    if core_algos.ADV_ESTIMATOR_REGISTRY.get(ESTIMATOR_NAME) is not compute_trloo_advantage:
        core_algos.register_adv_est(ESTIMATOR_NAME)(compute_trloo_advantage)
