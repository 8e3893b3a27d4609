"""Group filter: drop prompt groups whose rewards carry no learning signal, then select groups.

A group is the set of samples of one prompt (one ``group_id``). With leave-one-out baselines a
group whose rewards are all equal gives every sample a zero advantage, so it only costs compute.
Stages (Dr. Kernel's batch filter):

1. **Low variance.** Drop a group if the unbiased std of its valid rewards is below ``std_threshold``
   (1e-3). A group with a single valid sample is not checked (its std is undefined) and is kept.
2. **Too small.** Drop a group with fewer than ``min_group_size`` valid samples (the reference:
   ``n // 2 + 1``; the default 1 turns this stage off). A group with no valid sample is dropped.
3. **Selection.** If more than ``target_num_groups`` groups remain, pick that many at random
   (``generator``): complete groups (``target_group_size`` valid samples) first, then the others.

Rewards are one per row: either one per (trajectory, turn) row, with group ids that the caller
makes per turn if it wants (Dr. Kernel's ``uid_t<turn>``), or one per trajectory. The recipe
uses the **last-turn view**: a trajectory's reward is that of its last real turn
(``last_turn_rewards``; ``filter_groups_last_turn`` does both steps). The skip-and-buffer logic
(too few groups: keep the batch for the next step) belongs to the trainer; the metric
``filter/enough_groups`` and ``GroupSelection.enough`` tell it when to buffer.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

__all__ = ["GroupSelection", "filter_groups", "filter_groups_last_turn", "last_turn_rewards"]


@dataclass
class GroupSelection:
    """Result of ``filter_groups``."""

    row_mask: torch.Tensor
    """(M,) bool: True for valid rows of the selected groups."""
    kept_groups: list[Any]
    """Ids of the selected groups, in order of first appearance in ``group_ids``."""
    enough: bool
    """True if at least ``target_num_groups`` groups survived the filters (always True without a target)."""


GroupIds = Sequence[Any] | torch.Tensor | np.ndarray
"""One group (prompt) id per row: ints or strings, as a list, array or 1-D tensor."""


def _factorize(group_ids: GroupIds, m: int) -> tuple[torch.Tensor, list[Any]]:
    """Dense (M,) index in order of first appearance, and the id of each index."""
    ids = group_ids.tolist() if isinstance(group_ids, (torch.Tensor, np.ndarray)) else list(group_ids)
    if len(ids) != m:
        raise ValueError(f"group_ids must have length {m}, got {len(ids)}")
    codes: dict[Any, int] = {}
    index = [codes.setdefault(g, len(codes)) for g in ids]
    return torch.tensor(index, dtype=torch.long), list(codes)


def filter_groups(
    rewards: torch.Tensor,
    group_ids: GroupIds,
    row_mask: torch.Tensor | None = None,
    *,
    std_threshold: float = 1e-3,
    min_group_size: int = 1,
    target_num_groups: int | None = None,
    target_group_size: int | None = None,
    generator: torch.Generator | None = None,
) -> tuple[GroupSelection, dict[str, float]]:
    """Drop zero-variance and too-small groups, then select at most ``target_num_groups``.

    ``std_g = sqrt(sum_{i in g} (r_i - mean_g r)^2 / (n_g - 1))``; drop g if ``n_g >= 2`` and
    ``std_g < std_threshold``, or if ``n_g < max(min_group_size, 1)``.

    Args:
        rewards: (M,) one reward per row (trajectory, or (trajectory, turn) row).
        group_ids: length-M group id per row (ints or strings).
        row_mask: (M,) bool valid rows; None = all. Invalid rows count nowhere and stay False.
        std_threshold: minimum unbiased std of a group's rewards.
        min_group_size: minimum number of valid rows of a group.
        target_num_groups: select at most this many groups; None = keep every surviving group.
        target_group_size: a group with exactly this many valid rows is "complete" and preferred
            in the selection; None = all groups are equal.
        generator: randomness of the selection; required when a selection has to be made.

    Returns:
        ``(selection, metrics)``: ``GroupSelection`` and ``filter/num_groups``,
        ``filter/num_low_variance``, ``filter/num_too_small``, ``filter/num_valid_groups``,
        ``filter/num_selected``, ``filter/valid_group_frac``, ``filter/enough_groups`` (1.0/0.0),
        ``filter/selected_reward_mean``.

    Example:
        rewards ``[1, 1, 0, 2.5, 0.7]``, groups ``[a, a, b, b, c]``: a has std 0 (dropped), b has
        std 1.77 (kept), c is a singleton (kept): kept groups ``[b, c]``.
    """
    if rewards.dim() != 1:
        raise ValueError(f"rewards must be (M,), got shape {tuple(rewards.shape)}")
    m = rewards.shape[0]
    index, keys = _factorize(group_ids, m)
    index = index.to(rewards.device)
    num_groups = len(keys)
    valid = torch.ones(m, dtype=torch.bool, device=rewards.device) if row_mask is None else row_mask.bool()
    r = rewards.detach().double()
    r = torch.where(valid, r, torch.zeros_like(r))

    count = torch.zeros(num_groups, dtype=torch.float64, device=r.device).index_add_(0, index, valid.double())
    total = torch.zeros_like(count).index_add_(0, index, r)
    mean = total / count.clamp(min=1)
    dev2 = torch.where(valid, (r - mean[index]) ** 2, torch.zeros_like(r))
    ss = torch.zeros_like(count).index_add_(0, index, dev2)
    std = torch.sqrt(ss / (count - 1).clamp(min=1))  # unbiased std

    low_var = (count >= 2) & (std < std_threshold)
    too_small = (count < max(min_group_size, 1)) & ~low_var
    survive = ~low_var & ~too_small
    n_survive = int(survive.sum())

    selected = survive.clone()
    enough = target_num_groups is None or n_survive >= target_num_groups
    if target_num_groups is not None and n_survive > target_num_groups:
        if generator is None:
            raise ValueError("selecting target_num_groups out of more groups needs a torch.Generator")
        # random order, then complete groups first: sort by (incomplete, random rank)
        rank = torch.empty(num_groups, dtype=torch.float64)
        rank[torch.randperm(num_groups, generator=generator)] = torch.arange(num_groups, dtype=torch.float64)
        rank = rank.to(r.device)
        if target_group_size is not None:
            rank = rank + num_groups * (count != target_group_size).double()
        rank = torch.where(survive, rank, torch.full_like(rank, math.inf))
        chosen = torch.argsort(rank)[:target_num_groups]
        selected = torch.zeros_like(survive)
        selected[chosen] = True

    out_mask = valid & selected[index]
    kept = [keys[g] for g in torch.nonzero(selected).flatten().tolist()]
    sel_rewards = rewards.detach().double()[out_mask]
    metrics = {
        "filter/num_groups": float(num_groups),
        "filter/num_low_variance": float(low_var.sum()),
        "filter/num_too_small": float(too_small.sum()),
        "filter/num_valid_groups": float(n_survive),
        "filter/num_selected": float(len(kept)),
        "filter/valid_group_frac": n_survive / num_groups if num_groups else math.nan,
        "filter/enough_groups": 1.0 if enough else 0.0,
        "filter/selected_reward_mean": float(sel_rewards.mean()) if sel_rewards.numel() else math.nan,
    }
    return GroupSelection(row_mask=out_mask, kept_groups=kept, enough=enough), metrics


def last_turn_rewards(
    turn_rewards: torch.Tensor, turn_exists: torch.Tensor | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Reward of each trajectory's last existing turn.

    Args:
        turn_rewards: (N, T) turn rewards.
        turn_exists: (N, T) bool, True where the turn exists (front or back padding); None = all.

    Returns:
        ``(rewards, has_turn)``: (N,) reward of the last existing turn (0 where none exists) and
        (N,) bool, True where the trajectory has at least one turn.

    Example: rewards ``[[0.5, 1.0, 9.9]]`` with existence ``[[1, 1, 0]]`` give ``[1.0]``.
    """
    n, t = turn_rewards.shape
    if turn_exists is None:
        exists = torch.ones(n, t, dtype=torch.bool, device=turn_rewards.device)
    else:
        exists = turn_exists.bool()
    positions = torch.arange(t, device=turn_rewards.device).expand(n, t)
    last = torch.where(exists, positions, torch.full_like(positions, -1)).max(dim=1).values
    has_turn = last >= 0
    picked = turn_rewards.gather(1, last.clamp(min=0)[:, None])[:, 0]
    return torch.where(has_turn, picked, torch.zeros_like(picked)), has_turn


def filter_groups_last_turn(
    turn_rewards: torch.Tensor,
    group_ids: GroupIds,
    turn_exists: torch.Tensor | None = None,
    **knobs: Any,
) -> tuple[GroupSelection, dict[str, float]]:
    """``filter_groups`` on the last-turn view (the recipe's ``is_get_last_turn=True``).

    Args:
        turn_rewards: (N, T) turn rewards (after the meaningful-turn mask zeroed masked turns).
        group_ids: length-N prompt id per trajectory.
        turn_exists: (N, T) bool; None = all turns exist.
        **knobs: keyword arguments of ``filter_groups``.

    Returns:
        As ``filter_groups``, with ``row_mask`` (N,) over trajectories: the trainer keeps every
        turn of a selected trajectory.
    """
    rewards, has_turn = last_turn_rewards(turn_rewards, turn_exists)
    return filter_groups(rewards, group_ids, has_turn, **knobs)
