"""Statistics of the rollout/trainer mismatch: KL estimates, ESS, log ratios, perplexities.

All keys are namespaced ``mismatch/...``. With ``log rho_t = log pi_old_t - log mu_t`` (clamped to
+-20) over the valid tokens (``response_mask``), and tokens sampled from ``mu`` (vLLM):

- ``kl_k1 = mean_t(log mu_t - log pi_old_t) = mean_t(-log rho_t)``: unbiased estimate of
  ``KL(mu || pi_old)``; single samples can be negative.
- ``kl_k3 = mean_t(rho_t - 1 - log rho_t)``: non-negative, lower-variance estimate of the same KL
  (http://joschu.net/blog/kl-approx.html).
- ``ESS = 1 / E[(w / E[w])^2] = (sum w)^2 / (n sum w^2)``, in (0, 1]: 1 when all weights are equal,
  about 1/n when one weight dominates.

A metric whose denominator is empty (no valid token, no non-empty unit) is ``nan``.
"""

from __future__ import annotations

import math

import torch

from ._common import TrajIds, clamped_log_ratio, per_unit_log_weight, safe_exp, segment_sum, traj_index

__all__ = ["effective_sample_size", "mismatch_stats", "rejection_fractions"]


def effective_sample_size(weights: torch.Tensor, mask: torch.Tensor | None = None) -> float:
    """Normalised effective sample size of importance weights.

    ``ESS = 1 / E[(w / E[w])^2] = (sum_i w_i)^2 / (n * sum_i w_i^2)`` over the valid entries.

    Args:
        weights: any shape, non-negative weights (token weights (N, L), or one per sequence (J,)).
        mask: same shape, bool; None = all valid.

    Returns:
        ESS in (0, 1]; ``nan`` when no entry is valid or all valid weights are 0.

    Example:
        weights [1, 1, 1, 1] give 1.0; weights [4, 0, 0, 0] give 4^2 / (4 * 16) = 0.25.
    """
    w = weights.detach().double()
    if mask is not None:
        w = w[mask.bool()]
    w = w.reshape(-1)
    n = w.numel()
    sq = (w * w).sum()
    if n == 0 or sq.item() == 0.0:
        return math.nan
    return float(w.sum() ** 2 / (n * sq))  # (sum w)^2 / (n sum w^2)


def rejection_fractions(
    mask_before: torch.Tensor,
    mask_after: torch.Tensor,
    traj_ids: TrajIds | None = None,
    *,
    prefix: str = "mismatch/",
) -> dict[str, float]:
    """How much of the batch a rejection step removed, at token, turn and trajectory level.

    A turn (row) or trajectory counts as rejected when it had at least one valid token before and
    has none after; only units with a valid token before enter the denominators.

    Args:
        mask_before: (N, L) bool, valid tokens before the step.
        mask_after: (N, L) bool, valid tokens after it (a subset of ``mask_before``).
        traj_ids: length-N trajectory id per row; None = every row is its own trajectory.
        prefix: key prefix, e.g. ``"mismatch/rs_"``.

    Returns:
        ``{prefix}rejected_token_frac``, ``{prefix}rejected_turn_frac``,
        ``{prefix}rejected_traj_frac`` (each ``nan`` when its denominator is 0).
    """
    before = mask_before.bool()
    after = mask_after.bool() & before
    index, num_traj = traj_index(traj_ids, before.shape[0], before.device)
    row_before = before.any(dim=-1)
    row_after = after.any(dim=-1)
    traj_before = segment_sum(row_before.long(), index, num_traj) > 0
    traj_after = segment_sum(row_after.long(), index, num_traj) > 0

    def frac(had: torch.Tensor, has: torch.Tensor) -> float:
        n = int(had.sum())
        return float((had & ~has).sum()) / n if n else math.nan

    return {
        f"{prefix}rejected_token_frac": frac(before, after),
        f"{prefix}rejected_turn_frac": frac(row_before, row_after),
        f"{prefix}rejected_traj_frac": frac(traj_before, traj_after),
    }


def mismatch_stats(
    old_log_probs: torch.Tensor,
    rollout_log_probs: torch.Tensor,
    response_mask: torch.Tensor,
    traj_ids: TrajIds | None = None,
) -> dict[str, float]:
    """Diagnostics of the mismatch between ``mu`` (rollout) and ``pi_old`` (trainer).

    Args:
        old_log_probs: (N, L) ``log pi_old``.
        rollout_log_probs: (N, L) ``log mu``.
        response_mask: (N, L) bool valid tokens.
        traj_ids: length-N trajectory id per row (one row = one turn); None = single-turn.

    Returns:
        Flat dict, all floats:

        - ``mismatch/num_tokens``: number of valid tokens.
        - ``mismatch/kl_k1``, ``mismatch/kl_k3``: token-mean KL(mu || pi_old) estimates (module doc).
        - ``mismatch/log_ratio_mean|min|max``: of ``log rho_t`` over valid tokens.
        - ``mismatch/ppl_rollout``, ``mismatch/ppl_old``: mean over non-empty rows of the row's
          perplexity ``exp(-mean_t log p_t)`` under ``mu`` and under ``pi_old``.
        - ``mismatch/log_ppl_diff``: mean over non-empty rows of ``log ppl_old - log ppl_rollout``
          ``= -mean_t log rho_t``.
        - ``mismatch/ess_token``: ESS of ``rho_t`` over valid tokens.
        - ``mismatch/ess_turn``: ESS of the row weights ``exp(sum_t log rho_t)`` (non-empty rows).
        - ``mismatch/ess_traj``: ESS of the trajectory weights ``exp(sum over all its rows' tokens
          of log rho_t)`` (non-empty trajectories). Summed log ratios are clamped to +-20 before exp.
    """
    log_rho, mask = clamped_log_ratio(old_log_probs, rollout_log_probs, response_mask)
    index, num_traj = traj_index(traj_ids, mask.shape[0], mask.device)
    n_tok = int(mask.sum())
    out: dict[str, float] = {"mismatch/num_tokens": float(n_tok)}
    if n_tok == 0:
        for key in ("kl_k1", "kl_k3", "log_ratio_mean", "log_ratio_min", "log_ratio_max",
                    "ppl_rollout", "ppl_old", "log_ppl_diff", "ess_token", "ess_turn", "ess_traj"):
            out[f"mismatch/{key}"] = math.nan
        return out

    valid = log_rho[mask]
    rho = safe_exp(valid)
    out["mismatch/kl_k1"] = float((-valid).mean())  # k1 = mean(log mu - log pi_old)
    out["mismatch/kl_k3"] = float((rho - 1.0 - valid).mean())  # k3 = mean(rho - 1 - log rho)
    out["mismatch/log_ratio_mean"] = float(valid.mean())
    out["mismatch/log_ratio_min"] = float(valid.min())
    out["mismatch/log_ratio_max"] = float(valid.max())

    cnt = mask.sum(dim=-1)
    rows = cnt > 0
    denom = cnt.clamp(min=1).double()

    def row_mean(x: torch.Tensor) -> torch.Tensor:
        x = torch.where(mask, x.detach().double(), torch.zeros((), dtype=torch.float64, device=x.device))
        return (x.sum(dim=-1) / denom)[rows]

    mean_log_mu = row_mean(rollout_log_probs)
    mean_log_old = row_mean(old_log_probs)
    out["mismatch/ppl_rollout"] = float(torch.exp(-mean_log_mu).mean())  # ppl = exp(-mean log p)
    out["mismatch/ppl_old"] = float(torch.exp(-mean_log_old).mean())
    out["mismatch/log_ppl_diff"] = float((mean_log_mu - mean_log_old).mean())

    out["mismatch/ess_token"] = effective_sample_size(rho)
    for name, scope in (("turn", "row"), ("traj", "traj")):
        unit_lw = per_unit_log_weight(log_rho, mask, index, num_traj, scope=scope, reduce="sum")
        out[f"mismatch/ess_{name}"] = effective_sample_size(safe_exp(unit_lw))
    return out
