"""Tests for drkernel/advantages/rloo.py."""

from __future__ import annotations

import pytest
import torch

from drkernel.advantages.rloo import rloo_advantages
from drkernel.advantages.trloo import trloo_advantages


def _rloo_loop(rewards: torch.Tensor, groups: list, mask: torch.Tensor, gamma: float) -> torch.Tensor:
    """Element-by-element trajectory-level RLOO from the definition (tests only)."""
    n, num_turns = rewards.shape
    r, valid = rewards.tolist(), mask.tolist()
    ret: dict[int, float] = {}
    for i in range(n):
        turns = [t for t in range(num_turns) if valid[i][t]]
        if turns:  # R_i = G at the first valid turn
            ret[i] = sum(gamma ** (k - turns[0]) * r[i][k] for k in turns)
    adv = [[0.0] * num_turns for _ in range(n)]
    for i, r_i in ret.items():
        others = [ret[j] for j in ret if j != i and groups[j] == groups[i]]
        a_i = r_i - (sum(others) / len(others) if others else 0.0)
        for t in range(num_turns):
            if valid[i][t]:
                adv[i][t] = a_i
    return torch.tensor(adv, dtype=rewards.dtype)


def test_docstring_example() -> None:
    # R = [1 + 0, 0 + 0, 2 + 1] = [1, 0, 3], sum 4; LOO baselines (4 - R_i)/2 = [1.5, 2, 0.5];
    # A = [-0.5, -2, 2.5], the same on both turns of a trajectory.
    rewards = torch.tensor([[1.0, 0.0], [0.0, 0.0], [2.0, 1.0]])
    adv = rloo_advantages(rewards, ["u"] * 3)
    torch.testing.assert_close(adv, torch.tensor([[-0.5, -0.5], [-2.0, -2.0], [2.5, 2.5]]))


def test_single_turn_equals_trloo() -> None:
    gen = torch.Generator().manual_seed(0)
    rewards = torch.rand(12, 1, generator=gen, dtype=torch.float64)
    groups = [i % 3 for i in range(12)]
    torch.testing.assert_close(rloo_advantages(rewards, groups), trloo_advantages(rewards, groups))


def test_first_valid_turn_gamma_and_empty_trajectory() -> None:
    # gamma = 0.5. a: turn 1 masked, r2 = 2, r3 = 4 -> R_a = G_{a,2} = 2 + 0.5*4 = 4.
    # b: all valid, r = [1, 0, 2] -> R_b = 1 + 0 + 0.25*2 = 1.5.
    # c: no valid turn -> not in the group, A = 0 everywhere.
    # A_a = 4 - 1.5 = 2.5 on turns 2, 3; A_b = 1.5 - 4 = -2.5 on all turns.
    rewards = torch.tensor([[9.0, 2.0, 4.0], [1.0, 0.0, 2.0], [5.0, 5.0, 5.0]])
    mask = torch.tensor([[False, True, True], [True, True, True], [False, False, False]])
    adv = rloo_advantages(rewards, [0, 0, 0], mask, gamma=0.5)
    torch.testing.assert_close(
        adv, torch.tensor([[0.0, 2.5, 2.5], [-2.5, -2.5, -2.5], [0.0, 0.0, 0.0]])
    )


@pytest.mark.parametrize("seed", range(4))
def test_vectorised_matches_loop(seed: int) -> None:
    gen = torch.Generator().manual_seed(seed)
    n = int(torch.randint(1, 30, (1,), generator=gen))
    num_turns = int(torch.randint(1, 5, (1,), generator=gen))
    rewards = torch.randn(n, num_turns, generator=gen, dtype=torch.float64)
    mask = torch.rand(n, num_turns, generator=gen) < 0.6
    groups = [f"p{int(g)}" for g in torch.randint(0, 4, (n,), generator=gen)]
    gamma = [1.0, 0.9, 0.5, 0.0][seed]
    torch.testing.assert_close(
        rloo_advantages(rewards, groups, mask, gamma), _rloo_loop(rewards, groups, mask, gamma)
    )
