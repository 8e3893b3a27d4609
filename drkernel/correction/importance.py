"""Truncated importance sampling (TIS) weights between the rollout policy mu and pi_old.

With ``log rho_t = clamp(log pi_old_t - log mu_t, -20, 20)`` and the row's valid tokens ``m_t``:

| level        | unit                      | weight before truncation                                     |
| ------------ | ------------------------- | ------------------------------------------------------------ |
| ``token``    | token                     | ``w_t = rho_t``                                              |
| ``turn``     | row (one turn)            | ``w = exp(sum_t m_t log rho_t)``, broadcast to the row       |
| ``trajectory`` | all rows of a trajectory | ``w = exp(sum over its rows and tokens of m log rho)``, broadcast |

then ``w <- min(w, U)`` (``U = upper``, default 2.0), times the mask. Summed log ratios are clamped
to +-20 before the exp. The weights carry no gradient; they multiply the per-token policy loss.
(Reference §2.3; the Dr. Kernel recipe itself runs with TIS off, ``ROLLOUT_IS=null``.)
"""

from __future__ import annotations

import math

import torch

from ._common import (
    TrajIds,
    clamped_log_ratio,
    per_unit_log_weight,
    safe_exp,
    traj_index,
    unit_log_weight,
)
from .stats import effective_sample_size

__all__ = ["IS_LEVELS", "truncated_importance_weights"]

IS_LEVELS = ("token", "turn", "trajectory")
"""Accepted ``level`` values; ``"sequence"`` is accepted as an alias of ``"trajectory"``."""

_SCOPE = {"token": "token", "turn": "row", "trajectory": "traj", "sequence": "traj"}


def truncated_importance_weights(
    old_log_probs: torch.Tensor,
    rollout_log_probs: torch.Tensor,
    response_mask: torch.Tensor,
    traj_ids: TrajIds | None = None,
    *,
    level: str = "token",
    upper: float = 2.0,
) -> tuple[torch.Tensor, dict[str, float]]:
    """Truncated importance weights ``min(w, U) * m`` (module doc for ``w`` at each level).

    Args:
        old_log_probs: (N, L) ``log pi_old`` (trainer).
        rollout_log_probs: (N, L) ``log mu`` (rollout engine).
        response_mask: (N, L) bool valid tokens.
        traj_ids: length-N trajectory id per row (one row = one turn); None = single-turn, where
            ``"turn"`` and ``"trajectory"`` coincide.
        level: ``"token"``, ``"turn"`` or ``"trajectory"`` (alias ``"sequence"``).
        upper: truncation bound U > 0.

    Returns:
        ``(weights, metrics)``: (N, L) detached weights in ``old_log_probs.dtype``, 0 on invalid
        tokens; metrics ``mismatch/is_mean|min|max`` (over the level's non-empty units, after
        truncation), ``mismatch/is_truncated_frac`` (share of units with ``w > U``) and
        ``mismatch/is_ess`` (ESS of the truncated unit weights).

    Example:
        one row, ``log rho = [ln 3, ln 0.5]``, U = 2: token level gives ``[2.0, 0.5]`` (3 truncated);
        turn level gives ``exp(ln 3 + ln 0.5) = 1.5`` on both tokens.
    """
    if level not in _SCOPE:
        raise ValueError(f"unknown IS level {level!r}; known: {', '.join(IS_LEVELS)} (or 'sequence')")
    if not upper > 0:
        raise ValueError(f"upper must be > 0, got {upper}")
    log_rho, mask = clamped_log_ratio(old_log_probs, rollout_log_probs, response_mask)
    index, num_traj = traj_index(traj_ids, mask.shape[0], mask.device)
    scope = _SCOPE[level]
    log_w, _ = unit_log_weight(log_rho, mask, index, num_traj, scope=scope, reduce="sum")
    raw = safe_exp(log_w)
    weights = raw.clamp(max=upper) * mask  # w <- min(w, U) * m

    # One entry per non-empty unit (valid token, row or trajectory) for the metrics.
    unit_raw = safe_exp(per_unit_log_weight(log_rho, mask, index, num_traj, scope=scope, reduce="sum"))
    unit_w = unit_raw.clamp(max=upper)
    if unit_w.numel():
        metrics = {
            "mismatch/is_mean": float(unit_w.mean()),
            "mismatch/is_min": float(unit_w.min()),
            "mismatch/is_max": float(unit_w.max()),
            "mismatch/is_truncated_frac": float((unit_raw > upper).double().mean()),
            "mismatch/is_ess": effective_sample_size(unit_w),
        }
    else:
        metrics = {k: math.nan for k in ("mismatch/is_mean", "mismatch/is_min", "mismatch/is_max",
                                          "mismatch/is_truncated_frac", "mismatch/is_ess")}
    return weights.to(old_log_probs.dtype).detach(), metrics
