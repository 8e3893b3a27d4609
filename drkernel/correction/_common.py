"""Shared plumbing for the mismatch-correction modules: the clamped log ratio and trajectory sums.

Notation used for shapes (all modules of ``drkernel.correction``):

- ``N``: rows. One row is one turn of one trajectory (Dr. Kernel's trainer flattens the rollout
  to one row per (sample, turn)). Single-turn data is the special case of one row per trajectory.
- ``L``: padded response length of a row (tokens).
- ``J``: number of distinct trajectories among the rows.

Symbols: ``log mu`` = ``rollout_log_probs`` (vLLM), ``log pi_old`` = ``old_log_probs`` (trainer),
``log rho_t = log pi_old_t - log mu_t``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

SAFETY_BOUND = 20.0
"""Every log ratio is clamped to [-SAFETY_BOUND, SAFETY_BOUND] before it is exponentiated."""

TrajIds = Sequence[Any] | torch.Tensor | np.ndarray
"""One trajectory id per row (ints or strings); rows with equal ids are turns of one trajectory."""


def check_inputs(
    old_log_probs: torch.Tensor, rollout_log_probs: torch.Tensor, response_mask: torch.Tensor
) -> None:
    """Raise ``ValueError`` unless the three token tensors are 2-D and share one shape."""
    if old_log_probs.dim() != 2:
        raise ValueError(f"old_log_probs must be (N, L), got shape {tuple(old_log_probs.shape)}")
    if rollout_log_probs.shape != old_log_probs.shape or response_mask.shape != old_log_probs.shape:
        raise ValueError(
            "old_log_probs, rollout_log_probs and response_mask must share one (N, L) shape, got "
            f"{tuple(old_log_probs.shape)}, {tuple(rollout_log_probs.shape)}, "
            f"{tuple(response_mask.shape)}"
        )


def clamped_log_ratio(
    old_log_probs: torch.Tensor, rollout_log_probs: torch.Tensor, response_mask: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-token ``log rho = clamp(log pi_old - log mu, -20, 20)``, zero on masked-out tokens.

    Args:
        old_log_probs: (N, L) trainer log-probs ``log pi_old``.
        rollout_log_probs: (N, L) rollout log-probs ``log mu``.
        response_mask: (N, L) bool (or 0/1) mask of valid tokens.

    Returns:
        ``(log_rho, mask)``: (N, L) float64 log ratio, detached, 0 where ``mask`` is False, and the
        (N, L) bool mask.
    """
    check_inputs(old_log_probs, rollout_log_probs, response_mask)
    mask = response_mask.bool()
    diff = old_log_probs.detach().double() - rollout_log_probs.detach().double()
    # log rho_t = log pi_old_t - log mu_t, clamped to +-SAFETY_BOUND
    log_rho = diff.clamp(-SAFETY_BOUND, SAFETY_BOUND)
    # Padding may hold anything (vLLM pads with -1.0, NaN happens): zero it so sums ignore it.
    log_rho = torch.where(mask, log_rho, torch.zeros_like(log_rho))
    return log_rho, mask


def safe_exp(log_w: torch.Tensor) -> torch.Tensor:
    """``exp(clamp(log_w, -20, 20))``: the only way these modules exponentiate a log ratio."""
    return torch.exp(log_w.clamp(-SAFETY_BOUND, SAFETY_BOUND))


def traj_index(traj_ids: TrajIds | None, num_rows: int, device: torch.device) -> tuple[torch.Tensor, int]:
    """Map trajectory ids to a dense index.

    Args:
        traj_ids: length-N ids (ints or strings, list, array or 1-D tensor), or None for single-turn
            data (every row is its own trajectory).
        num_rows: N.
        device: device of the returned index.

    Returns:
        ``(index, J)``: (N,) int64 tensor with values in [0, J), equal for rows of one trajectory.
    """
    if traj_ids is None:
        return torch.arange(num_rows, device=device), num_rows
    if isinstance(traj_ids, torch.Tensor):
        if traj_ids.dim() != 1 or traj_ids.numel() != num_rows:
            raise ValueError(f"traj_ids must have length N={num_rows}, got shape {tuple(traj_ids.shape)}")
        _, inverse = torch.unique(traj_ids.to(device), return_inverse=True)
        return inverse.long(), int(inverse.max().item()) + 1 if num_rows else 0
    ids = list(traj_ids)
    if len(ids) != num_rows:
        raise ValueError(f"traj_ids must have length N={num_rows}, got {len(ids)}")
    codes: dict[Any, int] = {}
    index = [codes.setdefault(i.item() if isinstance(i, np.generic) else i, len(codes)) for i in ids]
    return torch.tensor(index, dtype=torch.long, device=device), len(codes)


def segment_sum(values: torch.Tensor, index: torch.Tensor, num_segments: int) -> torch.Tensor:
    """Sum (N,) ``values`` into (num_segments,) bins given by the (N,) ``index``."""
    out = torch.zeros(num_segments, dtype=values.dtype, device=values.device)
    return out.index_add_(0, index, values)


def unit_log_weight(
    log_rho: torch.Tensor,
    mask: torch.Tensor,
    index: torch.Tensor,
    num_traj: int,
    *,
    scope: str,
    reduce: str,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Aggregate per-token ``log rho`` over a unit (token, row = turn, or trajectory).

    Args:
        log_rho: (N, L) clamped log ratio, 0 on invalid tokens (see ``clamped_log_ratio``).
        mask: (N, L) bool valid tokens.
        index: (N,) trajectory index of each row, values in [0, num_traj).
        num_traj: J.
        scope: ``"token"``, ``"row"`` or ``"traj"``.
        reduce: ``"sum"`` (``sum_t m_t log rho_t``) or ``"mean"`` (the same divided by ``sum_t m_t``;
            a unit with no valid token gets 0). Ignored for ``scope="token"``.

    Returns:
        ``(log_w, unit_has_tokens)``: both (N, L), the unit's log weight and whether the unit holds
        at least one valid token, broadcast to every token position of the unit.
    """
    if scope == "token":
        return log_rho, mask
    row_sum = log_rho.sum(dim=-1)  # sum_t m_t log rho_t  (log rho is 0 where m_t = 0)
    row_cnt = mask.sum(dim=-1).to(log_rho.dtype)  # sum_t m_t
    if scope == "traj":
        row_sum = segment_sum(row_sum, index, num_traj)[index]
        row_cnt = segment_sum(row_cnt, index, num_traj)[index]
    elif scope != "row":
        raise ValueError(f"unknown scope {scope!r}")
    if reduce == "mean":
        row_sum = row_sum / row_cnt.clamp(min=1.0)  # empty unit -> 0 exactly, i.e. w = 1
    elif reduce != "sum":
        raise ValueError(f"unknown reduce {reduce!r}")
    shape = log_rho.shape
    return row_sum[:, None].expand(shape), (row_cnt > 0)[:, None].expand(shape)


def per_unit_log_weight(
    log_rho: torch.Tensor,
    mask: torch.Tensor,
    index: torch.Tensor,
    num_traj: int,
    *,
    scope: str,
    reduce: str,
) -> torch.Tensor:
    """One log weight per non-empty unit (valid token, row or trajectory), for metrics.

    Same arguments as ``unit_log_weight``. Returns a 1-D tensor with one entry per unit that holds
    at least one valid token.
    """
    if scope == "token":
        return log_rho[mask]
    total = log_rho.sum(dim=-1)
    cnt = mask.sum(dim=-1).to(log_rho.dtype)
    if scope == "traj":
        total = segment_sum(total, index, num_traj)
        cnt = segment_sum(cnt, index, num_traj)
    if reduce == "mean":
        total = total / cnt.clamp(min=1.0)
    return total[cnt > 0]
