"""Trajectory-level RLOO: one leave-one-out advantage per trajectory, broadcast to its turns."""

from __future__ import annotations

import torch

from drkernel.advantages._groups import cell_count, cell_sum, prepare_inputs
from drkernel.advantages.registry import GroupIds, register_advantage
from drkernel.advantages.returns import discounted_returns

__all__ = ["rloo_advantages"]


@register_advantage("rloo")
def rloo_advantages(
    turn_rewards: torch.Tensor,
    group_ids: GroupIds,
    turn_mask: torch.Tensor | None = None,
    gamma: float = 1.0,
) -> torch.Tensor:
    """Trajectory-level REINFORCE leave-one-out (RLOO), ignoring turn positions.

    Each trajectory gets one return R_i = G_{i, t0(i)}, where t0(i) is its first valid turn
    (so R_i = sum_{k, mask[i,k]} gamma^(k - t0) r_{i,k}). With S = {j : group_j == group_i and
    j has at least one valid turn}:

        A_i = R_i - 1/(|S|-1) * sum_{j in S, j != i} R_j   if |S| > 1;   A_i = R_i if |S| = 1

    and A_{i,t} = A_i on every valid turn t of i (0 on masked turns; 0 for a trajectory with no
    valid turn). Unlike TRLOO, all turns of a trajectory share one credit.

    Args:
        turn_rewards: float ``(N, T)``.
        group_ids: length-N ids (ints or strings) or 1-D int tensor.
        turn_mask: bool ``(N, T)`` or None.
        gamma: discount across turns, in [0, 1].

    Returns:
        A: ``(N, T)``.

    Example (gamma = 1, one group, all turns valid): per-turn rewards [[1, 0], [0, 0], [2, 1]]
    give R = [1, 0, 3], baselines [1.5, 2, 0.5], A_i = [-0.5, -2, 2.5] on both turns.
    """
    prep = prepare_inputs(turn_rewards, group_ids, turn_mask, gamma)
    rewards, mask = prep.rewards, prep.mask
    n = rewards.shape[0]
    zero = torch.zeros((), dtype=rewards.dtype)
    if n == 0 or rewards.shape[1] == 0:
        return torch.zeros_like(rewards)

    returns = discounted_returns(rewards, mask, gamma)  # G_{i,t}
    first = mask.to(torch.uint8).argmax(dim=1, keepdim=True)  # t0(i): first valid turn
    has_valid = mask.any(dim=1, keepdim=True)  # (N, 1)
    traj_return = torch.where(has_valid, returns.gather(1, first), zero)  # R_i = G_{i,t0}

    cell = prep.gid[:, None]  # one cell per group, (N, 1)
    total = cell_sum(traj_return, cell, prep.num_groups)  # sum_{j in S} R_j
    size = cell_count(cell, has_valid, prep.num_groups)  # |S|
    loo_mean = (total - traj_return) / (size - 1).clamp(min=1)  # mean_{j in S, j != i} R_j
    baseline = torch.where(size > 1, loo_mean, zero)
    traj_adv = traj_return - baseline  # A_i = R_i - mean_{j != i} R_j
    return torch.where(mask, traj_adv.expand_as(rewards), zero)  # broadcast to valid turns
