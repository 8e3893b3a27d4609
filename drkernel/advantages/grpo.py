"""Multi-turn GRPO over the same (group, turn) cells as TRLOO, for comparison and ablations."""

from __future__ import annotations

import torch

from drkernel.advantages._groups import cell_count, cell_index, cell_sum, prepare_inputs
from drkernel.advantages.registry import GroupIds, register_advantage
from drkernel.advantages.returns import discounted_returns

__all__ = ["grpo_advantages"]


@register_advantage("grpo")
def grpo_advantages(
    turn_rewards: torch.Tensor,
    group_ids: GroupIds,
    turn_mask: torch.Tensor | None = None,
    gamma: float = 1.0,
    *,
    norm_by_std: bool = False,
    eps: float = 1e-6,
) -> torch.Tensor:
    """Multi-turn GRPO: mean baseline over S, which includes i itself.

    With G and S as in TRLOO (S = {j : group_j == group_i, mask[j,t]}):

        A_{i,t} = G_{i,t} - mean_{j in S} G_{j,t}                        (norm_by_std=False)
        A_{i,t} = (G_{i,t} - mean_{j in S} G_{j,t}) / (std_S G + eps)     (norm_by_std=True)

    std_S is the unbiased (|S|-1) std; a std below eps is replaced by 1 so that a constant
    group gives exactly 0 rather than amplified round-off. A singleton cell (|S| = 1) uses
    mean 0 and std 1, i.e. A = G (as Dr. Kernel's GRPO does). Masked cells get 0.

    Because G_i sits in its own baseline, E[grad log pi(y_i) A_i] = (|S|-1)/|S| * grad J: the
    estimate is biased towards 0, more so in small cells (for |S| = 4 the expected gradient is
    scaled by 0.75; for |S| = 1 it is 0). TRLOO removes this.

    Args:
        turn_rewards: float ``(N, T)``.
        group_ids: length-N ids (ints or strings) or 1-D int tensor.
        turn_mask: bool ``(N, T)`` or None.
        gamma: discount across turns, in [0, 1].
        norm_by_std: divide by the cell's std (single-turn GRPO's normalisation).
        eps: added to the std when ``norm_by_std``.

    Returns:
        A: ``(N, T)``.

    Example (one group, T = 1, G = [1, 0, 0.5, 2.5], mean 1, std sqrt(3.5/3) = 1.0801):
    mean-only A = [0, -1, -0.5, 1.5]; with std A = [0, -0.9258, -0.4629, 1.3887].
    """
    prep = prepare_inputs(turn_rewards, group_ids, turn_mask, gamma)
    rewards, mask = prep.rewards, prep.mask
    num_turns = rewards.shape[1]
    num_cells = prep.num_groups * num_turns
    zero = torch.zeros((), dtype=rewards.dtype)

    returns = torch.where(mask, discounted_returns(rewards, mask, gamma), zero)  # G_{i,t}
    cell = cell_index(prep.gid, num_turns)
    size = cell_count(cell, mask, num_cells)  # |S|
    mean = cell_sum(returns, cell, num_cells) / size.clamp(min=1)  # mean_{j in S} G_j
    mean = torch.where(size > 1, mean, zero)  # singleton: mean 0
    centred = torch.where(mask, returns - mean, zero)  # A = G_i - mean_S G
    if norm_by_std:
        sq_dev = cell_sum(centred.square(), cell, num_cells)  # sum_S (G_j - mean)^2
        std = (sq_dev / (size - 1).clamp(min=1)).sqrt()  # unbiased std_S
        one = torch.ones((), dtype=std.dtype)
        std = torch.where((size > 1) & (std >= eps), std, one)  # singleton / constant: std 1
        centred = centred / (std + eps)  # A = (G_i - mean_S G) / (std_S + eps)
    return centred
