"""One entry point for rollout/trainer mismatch correction: MRS, token veto, optional TIS.

``apply_mismatch_correction`` composes, on the same inputs:

1. rejection sampling (``rejection.rejection_mask``, mode ``config.rs``), if ``rs`` is set;
2. the per-turn token veto (``rejection.token_veto_mask``), if ``token_veto`` is set. The veto is
   applied whether or not RS is on. (Dr. Kernel's trainer writes the modified mask back only when
   RS or coverage RS is on, so a veto alone is silently ignored there. Not here.)
3. truncated importance weights (``importance.truncated_importance_weights``), if ``is_level`` is
   set, multiplied by the final mask.

The Dr. Kernel recipe is the default config: trajectory-level geometric RS with
[0.999, 1.001], veto at 1e-4, no importance weights.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ._common import TrajIds, check_inputs
from .importance import IS_LEVELS, truncated_importance_weights
from .rejection import RS_MODES, rejection_mask, token_veto_mask
from .stats import mismatch_stats, rejection_fractions

__all__ = ["MismatchConfig", "apply_mismatch_correction"]


@dataclass
class MismatchConfig:
    """Mismatch correction settings. Defaults are the Dr. Kernel recipe (geometric RS in
    [0.999, 1.001], token veto 1e-4, no importance weights)."""

    rs: str | None = "geometric"
    """Rejection mode: one of ``token``, ``turn``, ``turn_geo``, ``sequence``, ``geometric``; None = off."""
    rs_lower: float | None = 0.999
    """RS lower bound L on the ratio; None means ``1 / rs_upper``."""
    rs_upper: float = 1.001
    """RS upper bound U on the ratio."""
    token_veto: float | None = 1e-4
    """Veto threshold tau: a turn with any valid token ``rho_t < tau`` is rejected; None = off."""
    is_level: str | None = None
    """Truncated IS level: ``token``, ``turn`` or ``trajectory``; None = no weights (the recipe)."""
    is_upper: float = 2.0
    """Truncation bound U of the importance weights."""

    def __post_init__(self) -> None:
        if self.rs is not None and self.rs not in RS_MODES:
            raise ValueError(f"unknown rs mode {self.rs!r}; known: {', '.join(RS_MODES)}")
        if self.is_level is not None and self.is_level not in (*IS_LEVELS, "sequence"):
            raise ValueError(f"unknown is_level {self.is_level!r}; known: {', '.join(IS_LEVELS)}")


def apply_mismatch_correction(
    old_log_probs: torch.Tensor,
    rollout_log_probs: torch.Tensor,
    response_mask: torch.Tensor,
    traj_ids: TrajIds | None = None,
    config: MismatchConfig | None = None,
) -> tuple[torch.Tensor, torch.Tensor | None, dict[str, float]]:
    """Rejection sampling, then the token veto, then (optionally) truncated IS weights.

    ``new_mask = response_mask AND rs_keep AND NOT veto``. The veto looks at every token that is
    valid in ``response_mask``, so a catastrophic token that token-level RS already dropped still
    vetoes its turn. Importance weights are computed from the input mask (every token that was
    sampled and is trained counts in a turn/trajectory ratio) and then multiplied by ``new_mask``.

    Args:
        old_log_probs: (N, L) ``log pi_old`` (trainer).
        rollout_log_probs: (N, L) ``log mu`` (rollout engine).
        response_mask: (N, L) bool valid tokens (already multiplied by the turn loss mask).
        traj_ids: length-N trajectory id per row (one row = one turn); None = single-turn.
        config: settings; None = ``MismatchConfig()`` (the recipe).

    Returns:
        ``(new_mask, is_weights, metrics)``: (N, L) bool mask; (N, L) detached weights or None when
        ``config.is_level`` is None; metrics from ``mismatch_stats`` (on the input mask), the RS,
        veto and IS steps (``mismatch/rs_*``, ``mismatch/veto_*``, ``mismatch/is_*``), and the
        combined ``mismatch/rejected_token_frac|turn_frac|traj_frac``.
    """
    cfg = MismatchConfig() if config is None else config
    check_inputs(old_log_probs, rollout_log_probs, response_mask)
    mask = response_mask.bool()
    metrics = mismatch_stats(old_log_probs, rollout_log_probs, mask, traj_ids)

    new_mask = mask
    if cfg.rs is not None:
        new_mask, rs_metrics = rejection_mask(
            old_log_probs, rollout_log_probs, mask, traj_ids,
            mode=cfg.rs, lower=cfg.rs_lower, upper=cfg.rs_upper,
        )
        metrics.update(rs_metrics)
    if cfg.token_veto is not None:
        veto_mask, veto_metrics = token_veto_mask(
            old_log_probs, rollout_log_probs, mask, traj_ids, threshold=cfg.token_veto
        )
        new_mask = new_mask & veto_mask
        metrics.update(veto_metrics)
    metrics.update(rejection_fractions(mask, new_mask, traj_ids, prefix="mismatch/"))

    weights = None
    if cfg.is_level is not None:
        weights, is_metrics = truncated_importance_weights(
            old_log_probs, rollout_log_probs, mask, traj_ids, level=cfg.is_level, upper=cfg.is_upper
        )
        weights = weights * new_mask
        metrics.update(is_metrics)
    return new_mask, weights, metrics
