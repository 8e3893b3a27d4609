"""TRLOO: turn-level REINFORCE leave-one-out advantages (Dr. Kernel, arXiv 2602.05885).

Importing this module needs torch and numpy only (no verl, vLLM, Ray, Triton or transformers).
"""

from __future__ import annotations

from typing import Sequence

import torch

from drkernel.advantages._groups import Prepared, cell_count, cell_index, cell_sum, prepare_inputs
from drkernel.advantages.registry import GroupIds, register_advantage
from drkernel.advantages.returns import discounted_returns

__all__ = ["trloo_advantages", "trloo_advantages_with_metrics"]


@register_advantage("trloo")
def trloo_advantages(
    turn_rewards: torch.Tensor,
    group_ids: GroupIds,
    turn_mask: torch.Tensor | None = None,
    gamma: float = 1.0,
) -> torch.Tensor:
    """Turn-level REINFORCE leave-one-out (TRLOO) advantages.

    With G_{i,t} = sum_{k >= t, mask[i,k]} gamma^(k-t) r_{i,k} (masked turns add 0) and
    S = {j : group_j == group_i, mask[j,t]} (same prompt, same absolute turn, turn trained):

        A_{i,t} = G_{i,t} - 1/(|S|-1) * sum_{j in S, j != i} G_{j,t}   if |S| > 1
        A_{i,t} = G_{i,t}                                              if |S| = 1 (baseline 0)
        A_{i,t} = 0                                                    if mask[i,t] is False

    Leaving i out of its own baseline keeps the policy gradient unbiased for every group size;
    GRPO's mean baseline (which includes i) scales the expected gradient by (|S|-1)/|S|, a
    factor that varies across turns as masks shrink the groups. Equivalently, for |S| > 1,
    A_{i,t} = |S|/(|S|-1) * (G_{i,t} - mean_S G_{.,t}). Within a full cell the A sum to 0.

    Args:
        turn_rewards: float ``(N, T)``, reward r_{i,t} of turn t of trajectory i. Values in
            masked cells are ignored (they may be NaN).
        group_ids: length-N sequence of ints or strings (or 1-D int tensor / numpy array);
            trajectories sampled from the same prompt share one id.
        turn_mask: bool ``(N, T)``, True where the turn exists and is trained; None = all True.
        gamma: discount across turns, in [0, 1].

    Returns:
        A: ``(N, T)``, same float dtype and device as ``turn_rewards``.

    Raises:
        ValueError: shapes disagree, ``len(group_ids) != N``, ``turn_mask`` is not bool,
            NaN/inf reward in a valid cell, gamma outside [0, 1].

    Worked example (gamma = 1, one group, T = 3, D's turn 2 masked)::

        traj  r1   r2   r3    G1   G2   G3     A1      A2     A3
        A     0    1.0  1.5   2.5  2.5  1.5   +0.433  +1.10  +0.533
        B     0    0    0     0    0    0     -2.900  -2.65  -1.467
        C     1.0  1.2  1.6   3.8  2.8  1.6   +2.167  +1.55  +0.667
        D     1.1  --   1.3   2.4  1.3  1.3   +0.300   0     +0.267

    Turn 1: |S| = 4, sum G = 8.7, so A_A = 2.5 - (8.7 - 2.5)/3 = 0.433. Turn 2: D is out,
    |S| = 3, sum G = 5.3, so A_B = 0 - 5.3/2 = -2.65. Turn 3: |S| = 4, sum G = 4.4, so
    A_D = 1.3 - 3.1/3 = 0.267.
    """
    prep = prepare_inputs(turn_rewards, group_ids, turn_mask, gamma)
    advantages, _, _ = _trloo_from_prepared(prep, gamma)
    return advantages


def trloo_advantages_with_metrics(
    turn_rewards: torch.Tensor,
    group_ids: GroupIds,
    turn_mask: torch.Tensor | None = None,
    gamma: float = 1.0,
) -> tuple[torch.Tensor, dict[str, float]]:
    """:func:`trloo_advantages` plus metrics over the valid cells.

    Returns:
        ``(A, metrics)`` with A ``(N, T)`` and metrics (Python floats, 0.0 if no valid cell):

        - ``trloo/adv_mean``, ``trloo/adv_std`` (population std), ``trloo/adv_abs_max``: of A.
        - ``trloo/return_mean``: mean of G.
        - ``trloo/group_size_mean``: mean |S| seen by a valid cell.
        - ``trloo/singleton_frac``: share of valid cells with |S| = 1 (baseline 0, A = G).
        - ``trloo/valid_frac``: share of all (i, t) cells with mask True.
    """
    prep = prepare_inputs(turn_rewards, group_ids, turn_mask, gamma)
    advantages, returns, size = _trloo_from_prepared(prep, gamma)
    mask = prep.mask
    n_valid = int(mask.sum())
    if n_valid == 0:
        keys = ("adv_mean", "adv_std", "adv_abs_max", "return_mean", "group_size_mean",
                "singleton_frac", "valid_frac")
        return advantages, {f"trloo/{k}": 0.0 for k in keys}
    adv_valid = advantages[mask].double()
    metrics = {
        "trloo/adv_mean": adv_valid.mean().item(),
        "trloo/adv_std": adv_valid.std(correction=0).item(),
        "trloo/adv_abs_max": adv_valid.abs().max().item(),
        "trloo/return_mean": returns[mask].double().mean().item(),
        "trloo/group_size_mean": size[mask].double().mean().item(),
        "trloo/singleton_frac": (size[mask] == 1).double().mean().item(),
        "trloo/valid_frac": n_valid / mask.numel(),
    }
    return advantages, metrics


def _trloo_from_prepared(
    prep: Prepared, gamma: float
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Vectorised TRLOO on validated inputs; returns ``(A, G, |S|)``, each ``(N, T)``."""
    rewards, mask = prep.rewards, prep.mask
    num_turns = rewards.shape[1]
    num_cells = prep.num_groups * num_turns
    returns = discounted_returns(rewards, mask, gamma)  # G_{i,t}
    returns = torch.where(mask, returns, torch.zeros((), dtype=returns.dtype))
    cell = cell_index(prep.gid, num_turns)  # (group, turn) cell of each (i, t)
    total = cell_sum(returns, cell, num_cells)  # sum_{j in S} G_j
    size = cell_count(cell, mask, num_cells)  # |S|
    loo_mean = (total - returns) / (size - 1).clamp(min=1)  # mean_{j in S, j != i} G_j
    baseline = torch.where(size > 1, loo_mean, torch.zeros((), dtype=loo_mean.dtype))  # |S|=1: 0
    advantages = torch.where(mask, returns - baseline, torch.zeros((), dtype=returns.dtype))
    return advantages, returns, size  # A = G_i - mean_{j != i} G_j


def _trloo_advantages_loop(
    turn_rewards: torch.Tensor,
    group_ids: Sequence[object],
    turn_mask: torch.Tensor | None = None,
    gamma: float = 1.0,
) -> torch.Tensor:
    """Readable reference TRLOO with plain Python loops, O(N^2 T). For tests only.

    Shares no code with the vectorised path: returns, groups and baselines are all recomputed
    here element by element from the definitions.
    """
    n, num_turns = turn_rewards.shape
    r = turn_rewards.tolist()
    valid = [[True] * num_turns for _ in range(n)] if turn_mask is None else turn_mask.tolist()
    ids = group_ids.tolist() if isinstance(group_ids, torch.Tensor) else list(group_ids)

    # G_{i,t} = sum_{k >= t, valid} gamma^(k-t) r_{i,k}
    g = [[0.0] * num_turns for _ in range(n)]
    for i in range(n):
        for t in range(num_turns):
            g[i][t] = sum(
                gamma ** (k - t) * r[i][k] for k in range(t, num_turns) if valid[i][k]
            )

    adv = [[0.0] * num_turns for _ in range(n)]
    for i in range(n):
        for t in range(num_turns):
            if not valid[i][t]:
                continue  # A = 0 on masked turns
            peers = [j for j in range(n) if ids[j] == ids[i] and valid[j][t]]  # S
            if len(peers) == 1:
                adv[i][t] = g[i][t]  # |S| = 1: baseline 0
            else:
                others = [g[j][t] for j in peers if j != i]
                adv[i][t] = g[i][t] - sum(others) / len(others)  # G_i - mean_{j != i} G_j
    return torch.tensor(adv, dtype=turn_rewards.dtype).reshape(n, num_turns)
