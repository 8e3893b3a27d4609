"""Tests for drkernel/advantages/grpo.py."""

from __future__ import annotations

import math

import pytest
import torch

from drkernel.advantages.grpo import grpo_advantages
from drkernel.advantages.trloo import trloo_advantages

GROUP_1_6 = torch.tensor([[1.0], [0.0], [0.5], [2.5]], dtype=torch.float64)


def _grpo_loop(
    rewards: torch.Tensor, groups: list, mask: torch.Tensor, gamma: float, norm_by_std: bool, eps: float = 1e-6
) -> torch.Tensor:
    """Element-by-element GRPO from the definition (tests only)."""
    n, num_turns = rewards.shape
    r, valid = rewards.tolist(), mask.tolist()
    g = [
        [sum(gamma ** (k - t) * r[i][k] for k in range(t, num_turns) if valid[i][k]) for t in range(num_turns)]
        for i in range(n)
    ]
    adv = [[0.0] * num_turns for _ in range(n)]
    for i in range(n):
        for t in range(num_turns):
            if not valid[i][t]:
                continue
            peers = [g[j][t] for j in range(n) if groups[j] == groups[i] and valid[j][t]]
            mean, std = 0.0, 1.0  # singleton: mean 0, std 1
            if len(peers) > 1:
                mean = sum(peers) / len(peers)
                std = math.sqrt(sum((x - mean) ** 2 for x in peers) / (len(peers) - 1))
                std = std if std >= eps else 1.0
            adv[i][t] = (g[i][t] - mean) / (std + eps) if norm_by_std else g[i][t] - mean
    return torch.tensor(adv, dtype=rewards.dtype)


def test_mean_baseline_reference_1_6() -> None:
    # G = [1, 0, 0.5, 2.5], mean 1 (includes i): A = G - 1 = [0, -1, -0.5, 1.5].
    adv = grpo_advantages(GROUP_1_6, ["p"] * 4)
    torch.testing.assert_close(adv[:, 0], torch.tensor([0.0, -1.0, -0.5, 1.5], dtype=torch.float64))


def test_std_normalised_reference_1_6() -> None:
    # Unbiased std = sqrt((0 + 1 + 0.25 + 2.25)/3) = sqrt(3.5/3) = 1.0801;
    # A = (G - 1)/(1.0801 + 1e-6) = [0, -0.9258, -0.4629, 1.3887].
    adv = grpo_advantages(GROUP_1_6, ["p"] * 4, norm_by_std=True)
    torch.testing.assert_close(
        adv[:, 0], torch.tensor([0.0, -0.9258, -0.4629, 1.3887], dtype=torch.float64), atol=1e-4, rtol=0
    )
    std = math.sqrt(3.5 / 3)
    torch.testing.assert_close(adv[3, 0].item(), 1.5 / (std + 1e-6))


def test_trloo_is_grpo_rescaled_by_n_over_n_minus_1() -> None:
    # For |S| > 1: A_TRLOO = |S|/(|S|-1) * A_GRPO. Here |S| = 4 at turns 1 and 3, 3 at turn 2.
    gen = torch.Generator().manual_seed(0)
    rewards = torch.rand(4, 3, generator=gen, dtype=torch.float64)
    mask = torch.ones(4, 3, dtype=torch.bool)
    mask[3, 1] = False
    scale = torch.tensor([4 / 3, 3 / 2, 4 / 3], dtype=torch.float64)
    torch.testing.assert_close(
        trloo_advantages(rewards, [0] * 4, mask), grpo_advantages(rewards, [0] * 4, mask) * scale
    )


def test_singleton_and_constant_groups() -> None:
    # Singleton cell: baseline 0 -> A = G (= 2 + 1 = 3 at turn 1, 1 at turn 2); with std: G/(1 + eps).
    single = torch.tensor([[2.0, 1.0]])
    torch.testing.assert_close(grpo_advantages(single, ["x"]), torch.tensor([[3.0, 1.0]]))
    torch.testing.assert_close(
        grpo_advantages(single, ["x"], norm_by_std=True), torch.tensor([[3.0, 1.0]]) / (1 + 1e-6)
    )
    # Constant group: numerator 0, std 0 -> replaced by 1, so A is exactly 0 (no 0/eps blow-up).
    const = torch.full((5, 1), 0.1)
    assert (grpo_advantages(const, [0] * 5, norm_by_std=True) == 0).all()


def test_masked_zero_and_zero_sum() -> None:
    gen = torch.Generator().manual_seed(1)
    rewards = torch.rand(6, 2, generator=gen, dtype=torch.float64)
    mask = torch.ones(6, 2, dtype=torch.bool)
    mask[0, 1] = False
    adv = grpo_advantages(rewards, [0, 0, 0, 1, 1, 1], mask)
    assert adv[0, 1].item() == 0.0
    torch.testing.assert_close(adv.view(2, 3, 2).sum(1), torch.zeros(2, 2, dtype=torch.float64))


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("norm_by_std", [False, True])
def test_vectorised_matches_loop(seed: int, norm_by_std: bool) -> None:
    gen = torch.Generator().manual_seed(seed)
    n = int(torch.randint(1, 30, (1,), generator=gen))
    num_turns = int(torch.randint(1, 5, (1,), generator=gen))
    rewards = torch.randn(n, num_turns, generator=gen, dtype=torch.float64)
    mask = torch.rand(n, num_turns, generator=gen) < 0.75
    groups = [int(g) for g in torch.randint(0, 5, (n,), generator=gen)]
    gamma = [1.0, 0.8, 0.5, 0.0][seed]
    torch.testing.assert_close(
        grpo_advantages(rewards, groups, mask, gamma, norm_by_std=norm_by_std),
        _grpo_loop(rewards, groups, mask, gamma, norm_by_std),
        rtol=1e-9,
        atol=1e-9,
    )
