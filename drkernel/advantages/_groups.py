"""Shared plumbing for the estimators: input checks, dense group ids, (group, turn) cell sums.

Notation: N trajectories, T turns, P distinct groups (prompts). A (group, turn) cell is
``c = g_i * T + t``; S_c = {j : g_j = g, mask[j, t]} is the set of trajectories in that cell.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np
import torch

from drkernel.advantages.registry import GroupIds


def dense_group_ids(
    group_ids: GroupIds, n: int, device: torch.device | str = "cpu"
) -> tuple[torch.Tensor, int]:
    """Map arbitrary group ids to dense int64 ids in [0, P).

    Args:
        group_ids: length-N sequence of hashable ids (ints, strings, tuples, ...), a numpy array,
            or a 1-D integer tensor.
        n: expected length N.
        device: device of the returned tensor.

    Returns:
        ``(gid, P)``: int64 tensor ``(N,)`` and the number of distinct groups. Ids compare by
        value (``1`` and ``"1"`` are different groups).

    Raises:
        ValueError: wrong length, or a tensor / array that is not 1-D integer.
    """
    if isinstance(group_ids, np.ndarray) and group_ids.dtype.kind in "iu":
        group_ids = torch.from_numpy(np.ascontiguousarray(group_ids).astype(np.int64, copy=False))
    if isinstance(group_ids, torch.Tensor):
        if group_ids.dim() != 1 or group_ids.dtype.is_floating_point or group_ids.is_complex():
            raise ValueError(
                f"group_ids tensor must be 1-D integer, got shape {tuple(group_ids.shape)} "
                f"dtype {group_ids.dtype}"
            )
        if group_ids.numel() != n:
            raise ValueError(f"len(group_ids)={group_ids.numel()} != N={n} (rows of turn_rewards)")
        return _dense_from_int_tensor(group_ids.to(device=device, dtype=torch.long))

    if len(group_ids) != n:
        raise ValueError(f"len(group_ids)={len(group_ids)} != N={n} (rows of turn_rewards)")
    if n == 0:
        return torch.zeros(0, dtype=torch.long, device=device), 0
    as_ints = _try_int_tensor(group_ids)
    if as_ints is not None:
        return _dense_from_int_tensor(as_ints.to(device))
    # Hashable Python objects (strings, tuples, ...): first-appearance order. The only per-row
    # Python work is this dict lookup, which a Python sequence of objects needs anyway.
    index: dict[object, int] = {}
    dense = [index.setdefault(g, len(index)) for g in group_ids]
    return torch.tensor(dense, dtype=torch.long, device=device), len(index)


def _try_int_tensor(group_ids: Sequence[object]) -> torch.Tensor | None:
    """A list of Python ints as an int64 tensor, or None if it is anything else."""
    if isinstance(group_ids, (str, bytes)):
        return None
    try:
        t = torch.tensor(group_ids)
    except (TypeError, ValueError, RuntimeError, OverflowError):
        return None
    if t.dim() != 1 or t.dtype not in (torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8):
        return None  # floats, bools, nested tuples: hash them instead
    return t.long()


def _dense_from_int_tensor(ids: torch.Tensor) -> tuple[torch.Tensor, int]:
    if ids.numel() == 0:
        return ids, 0
    lo, hi = int(ids.min()), int(ids.max())
    if lo >= 0 and hi < ids.numel():
        return ids, hi + 1  # already dense enough: unused ids are empty cells, no sort needed
    uniq, inverse = torch.unique(ids, return_inverse=True)
    return inverse, int(uniq.numel())


@dataclass(frozen=True)
class Prepared:
    """Validated estimator inputs."""

    rewards: torch.Tensor  # (N, T) float, 0 where mask is False
    mask: torch.Tensor  # (N, T) bool
    gid: torch.Tensor  # (N,) int64 dense group ids
    num_groups: int  # P


def prepare_inputs(
    turn_rewards: torch.Tensor,
    group_ids: GroupIds,
    turn_mask: torch.Tensor | None,
    gamma: float,
) -> Prepared:
    """Check the shared estimator arguments; zero masked rewards.

    Raises:
        TypeError: ``turn_rewards`` is not a tensor.
        ValueError: not 2-D; complex; ``turn_mask`` not bool or of another shape; NaN/inf reward
            in a valid (masked-in) cell; ``len(group_ids) != N``; gamma outside [0, 1].
    """
    if not isinstance(turn_rewards, torch.Tensor):
        raise TypeError(f"turn_rewards must be a torch.Tensor (N, T), got {type(turn_rewards).__name__}")
    if turn_rewards.dim() != 2:
        raise ValueError(f"turn_rewards must be 2-D (N, T), got shape {tuple(turn_rewards.shape)}")
    if turn_rewards.is_complex():
        raise ValueError(f"turn_rewards must be real, got dtype {turn_rewards.dtype}")
    if not turn_rewards.dtype.is_floating_point:
        turn_rewards = turn_rewards.to(torch.get_default_dtype())
    n, _ = turn_rewards.shape

    if turn_mask is None:
        mask = torch.ones_like(turn_rewards, dtype=torch.bool)
    else:
        if not isinstance(turn_mask, torch.Tensor) or turn_mask.dtype != torch.bool:
            got = turn_mask.dtype if isinstance(turn_mask, torch.Tensor) else type(turn_mask).__name__
            raise ValueError(f"turn_mask must be a bool tensor (N, T), got {got}; use mask.bool()")
        if turn_mask.shape != turn_rewards.shape:
            raise ValueError(
                f"turn_mask shape {tuple(turn_mask.shape)} != turn_rewards shape "
                f"{tuple(turn_rewards.shape)}"
            )
        mask = turn_mask.to(turn_rewards.device)

    bad = mask & ~torch.isfinite(turn_rewards)
    if bool(bad.any()):
        i, t = (int(x) for x in bad.nonzero()[0])
        raise ValueError(
            f"turn_rewards has {int(bad.sum())} NaN/inf value(s) in valid cells "
            f"(first at trajectory {i}, turn {t}: {turn_rewards[i, t].item()})"
        )
    gamma = float(gamma)
    if not 0.0 <= gamma <= 1.0:
        raise ValueError(f"gamma must be in [0, 1], got {gamma}")

    gid, num_groups = dense_group_ids(group_ids, n, turn_rewards.device)
    rewards = torch.where(mask, turn_rewards, torch.zeros((), dtype=turn_rewards.dtype))
    return Prepared(rewards=rewards, mask=mask, gid=gid, num_groups=num_groups)


def cell_index(gid: torch.Tensor, num_turns: int) -> torch.Tensor:
    """Flat (group, turn) cell index ``c = g_i * T + t``, int64 ``(N, T)``."""
    turns = torch.arange(num_turns, device=gid.device)
    return gid[:, None] * num_turns + turns[None, :]


def cell_sum(values: torch.Tensor, cell: torch.Tensor, num_cells: int) -> torch.Tensor:
    """Per element, the sum of ``values`` over its cell's members: sum_{j in S_c} v_j, ``(N, T)``.

    ``values`` must already be 0 where the turn mask is False, so masked cells add nothing.
    """
    flat = torch.zeros(num_cells, dtype=values.dtype, device=values.device)
    flat.index_add_(0, cell.reshape(-1), values.reshape(-1))  # scatter: sum over S_c
    return flat[cell]  # gather back to (N, T)


def cell_count(cell: torch.Tensor, mask: torch.Tensor, num_cells: int) -> torch.Tensor:
    """Per element, |S_c| (number of valid members of its cell), int64 ``(N, T)``."""
    counts = torch.bincount(cell[mask], minlength=num_cells)  # |S_c|
    return counts[cell]
