"""Mismatch rejection sampling (MRS): drop tokens, turns or trajectories whose ratio is off.

With ``log rho_t = clamp(log pi_old_t - log mu_t, -20, 20)`` and valid tokens ``m_t``, a unit is
kept iff ``L <= w <= U`` (deterministically), where

| mode          | unit                                    | w                                                |
| ------------- | --------------------------------------- | ------------------------------------------------ |
| ``token``     | token                                   | ``rho_t``                                        |
| ``turn``      | row (one turn)                          | ``exp(sum_t m_t log rho_t)``                     |
| ``turn_geo``  | row                                     | ``exp(sum_t m_t log rho_t / sum_t m_t)``         |
| ``sequence``  | trajectory (all its rows)               | ``exp(sum over all its valid tokens of log rho)`` |
| ``geometric`` | trajectory (all its rows)               | ``exp(mean over all its valid tokens of log rho)`` |

Trajectory decisions are broadcast back to every row of the trajectory. Without ``traj_ids``
every row is its own trajectory, so ``sequence``/``geometric`` equal ``turn``/``turn_geo``: the
single-turn semantics of the reference. Summed log ratios are clamped to +-20 before the exp. The
decision is deterministic. The Dr. Kernel recipe: ``geometric`` with [0.999, 1.001], i.e. keep a
trajectory only if ``|mean log rho| <~ 1e-3``.

Empty units. A row or trajectory with no valid token (padding, ``loss_mask = 0``) has nothing to
reject: it is reported as kept and left out of every metric denominator. (Dr. Kernel's code
divides by ``count + 1e-8``, which gives ``w ~ 1`` and the same outcome; here ``w = 1`` exactly.)

The per-turn token veto (a row is dropped if any valid token has ``rho_t < tau``) lives here
too: ``token_veto_mask``.
"""

from __future__ import annotations

import math

import torch

from ._common import TrajIds, clamped_log_ratio, per_unit_log_weight, safe_exp, traj_index, unit_log_weight
from .stats import rejection_fractions

__all__ = ["RS_MODES", "rejection_mask", "token_veto_mask"]

RS_MODES = ("token", "turn", "turn_geo", "sequence", "geometric")
"""Accepted ``mode`` values of ``rejection_mask``."""

# mode -> (scope of the unit, how its log ratios are reduced)
_MODE = {
    "token": ("token", "sum"),
    "turn": ("row", "sum"),
    "turn_geo": ("row", "mean"),
    "sequence": ("traj", "sum"),
    "geometric": ("traj", "mean"),
}


def rejection_mask(
    old_log_probs: torch.Tensor,
    rollout_log_probs: torch.Tensor,
    response_mask: torch.Tensor,
    traj_ids: TrajIds | None = None,
    *,
    mode: str = "geometric",
    lower: float | None = 0.999,
    upper: float = 1.001,
) -> tuple[torch.Tensor, dict[str, float]]:
    """Mismatch rejection: keep a unit iff ``lower <= w <= upper`` (module doc for ``w``).

    Args:
        old_log_probs: (N, L) ``log pi_old`` (trainer).
        rollout_log_probs: (N, L) ``log mu`` (rollout engine).
        response_mask: (N, L) bool valid tokens (already multiplied by the turn's loss mask).
        traj_ids: length-N trajectory id per row (one row = one turn); None = single-turn.
        mode: one of ``RS_MODES``.
        lower: lower bound L > 0; None means ``1 / upper``.
        upper: upper bound U >= L.

    Returns:
        ``(new_mask, metrics)``: (N, L) bool, ``response_mask`` with rejected units cleared, and

        - ``mismatch/rs_rejected_token_frac|turn_frac|traj_frac`` (``rejection_fractions``);
        - ``mismatch/rs_ratio_mean|min|max``: ``w`` over the mode's non-empty units;
        - ``mismatch/rs_below_lower_frac``, ``mismatch/rs_above_upper_frac``: share of those units
          rejected for ``w < L`` and for ``w > U``.

    Example:
        ``geometric`` with [0.999, 1.001]: a trajectory whose valid tokens have mean
        ``log rho = 0.0008`` has ``w = e^0.0008 = 1.0008`` and is kept; with 0.0012,
        ``w = 1.0012 > 1.001`` and every row of it is cleared.
    """
    if mode not in _MODE:
        raise ValueError(f"unknown rejection mode {mode!r}; known: {', '.join(RS_MODES)}")
    low = 1.0 / upper if lower is None else lower
    if not 0 < low <= upper:
        raise ValueError(f"need 0 < lower <= upper, got lower={low}, upper={upper}")
    log_rho, mask = clamped_log_ratio(old_log_probs, rollout_log_probs, response_mask)
    index, num_traj = traj_index(traj_ids, mask.shape[0], mask.device)
    scope, reduce = _MODE[mode]

    log_w, unit_has = unit_log_weight(log_rho, mask, index, num_traj, scope=scope, reduce=reduce)
    w = safe_exp(log_w)
    keep = ((w >= low) & (w <= upper)) | ~unit_has  # L <= w <= U; empty units are kept
    new_mask = mask & keep

    metrics = rejection_fractions(mask, new_mask, traj_ids, prefix="mismatch/rs_")
    unit_w = safe_exp(per_unit_log_weight(log_rho, mask, index, num_traj, scope=scope, reduce=reduce))
    if unit_w.numel():
        metrics["mismatch/rs_ratio_mean"] = float(unit_w.mean())
        metrics["mismatch/rs_ratio_min"] = float(unit_w.min())
        metrics["mismatch/rs_ratio_max"] = float(unit_w.max())
        metrics["mismatch/rs_below_lower_frac"] = float((unit_w < low).double().mean())
        metrics["mismatch/rs_above_upper_frac"] = float((unit_w > upper).double().mean())
    else:
        for key in ("ratio_mean", "ratio_min", "ratio_max", "below_lower_frac", "above_upper_frac"):
            metrics[f"mismatch/rs_{key}"] = math.nan
    return new_mask, metrics


def token_veto_mask(
    old_log_probs: torch.Tensor,
    rollout_log_probs: torch.Tensor,
    response_mask: torch.Tensor,
    traj_ids: TrajIds | None = None,
    *,
    threshold: float = 1e-4,
) -> tuple[torch.Tensor, dict[str, float]]:
    """Per-turn token veto: a row with any valid token ``rho_t < tau`` is rejected whole.

    ``veto(row) = exists t: m_t and log rho_t < ln(tau)`` (``tau = threshold``; recipe 1e-4, so
    ``ln tau = -9.21``). Only that row (turn) is cleared, not the rest of its trajectory.

    Args:
        old_log_probs: (N, L) ``log pi_old``.
        rollout_log_probs: (N, L) ``log mu``.
        response_mask: (N, L) bool valid tokens.
        traj_ids: length-N trajectory ids; used only for the trajectory-level metric.
        threshold: ``tau`` in (0, 1].

    Returns:
        ``(new_mask, metrics)``: (N, L) bool mask with vetoed rows cleared, and
        ``mismatch/veto_rejected_token_frac|turn_frac|traj_frac``.

    Example:
        a row with ``log rho = [0.0, -10.0]`` is vetoed (``-10 < -9.21``); ``[-9.0, 0.5]`` is not.
    """
    if not 0 < threshold <= 1:
        raise ValueError(f"veto threshold must be in (0, 1], got {threshold}")
    log_rho, mask = clamped_log_ratio(old_log_probs, rollout_log_probs, response_mask)
    bad = mask & (log_rho < math.log(threshold))  # log rho_t < ln tau on a valid token
    vetoed = bad.any(dim=-1, keepdim=True)
    new_mask = mask & ~vetoed
    return new_mask, rejection_fractions(mask, new_mask, traj_ids, prefix="mismatch/veto_")
