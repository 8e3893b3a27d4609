"""Tests for drkernel/advantages/trloo.py (and returns.py, which it builds on)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from drkernel.advantages import get_advantage
from drkernel.advantages.returns import discounted_returns
from drkernel.advantages.trloo import (
    _trloo_advantages_loop,
    trloo_advantages,
    trloo_advantages_with_metrics,
)

REPO_ROOT = Path(__file__).resolve().parents[2]


def worked_example() -> tuple[torch.Tensor, torch.Tensor]:
    """Reference §1.4: 4 trajectories (A, B, C, D) of one prompt, T = 3, D's turn 2 masked."""
    rewards = torch.tensor(
        [
            [0.0, 1.0, 1.5],  # A
            [0.0, 0.0, 0.0],  # B
            [1.0, 1.2, 1.6],  # C
            [1.1, 0.0, 1.3],  # D (turn-2 reward is 0 and masked anyway)
        ],
        dtype=torch.float64,
    )
    mask = torch.ones(4, 3, dtype=torch.bool)
    mask[3, 1] = False
    return rewards, mask


def test_worked_example_reference_1_4() -> None:
    rewards, mask = worked_example()
    adv = trloo_advantages(rewards, ["p"] * 4, mask)
    # Returns (gamma = 1, masked reward counts 0): G1 = [2.5, 0, 3.8, 2.4],
    # G2 = [2.5, 0, 2.8, (D out)], G3 = [1.5, 0, 1.6, 1.3].
    # Turn 1: |S| = 4, sum 8.7. A_i = G_i - (8.7 - G_i)/3:
    #   A: 2.5 - 6.2/3 = 0.4333   B: 0 - 8.7/3 = -2.9   C: 3.8 - 4.9/3 = 2.1667   D: 2.4 - 6.3/3 = 0.3
    # Turn 2: |S| = 3 (D masked), sum 5.3. A_i = G_i - (5.3 - G_i)/2:
    #   A: 2.5 - 1.4 = 1.1        B: 0 - 2.65 = -2.65     C: 2.8 - 1.25 = 1.55        D: 0 (masked)
    # Turn 3: |S| = 4, sum 4.4. A_i = G_i - (4.4 - G_i)/3:
    #   A: 1.5 - 2.9/3 = 0.5333   B: 0 - 4.4/3 = -1.4667  C: 1.6 - 2.8/3 = 0.6667     D: 1.3 - 3.1/3 = 0.2667
    expected = torch.tensor(
        [
            [2.5 - 6.2 / 3, 1.1, 1.5 - 2.9 / 3],
            [-8.7 / 3, -2.65, -4.4 / 3],
            [3.8 - 4.9 / 3, 1.55, 1.6 - 2.8 / 3],
            [2.4 - 6.3 / 3, 0.0, 1.3 - 3.1 / 3],
        ],
        dtype=torch.float64,
    )
    torch.testing.assert_close(adv, expected)
    # The rounded numbers printed in the reference.
    torch.testing.assert_close(
        adv,
        torch.tensor(
            [[0.433, 1.1, 0.533], [-2.9, -2.65, -1.467], [2.167, 1.55, 0.667], [0.3, 0.0, 0.267]],
            dtype=torch.float64,
        ),
        atol=1e-3,
        rtol=0,
    )


def test_self_inclusion_group_reference_1_6() -> None:
    # G = [1, 0, 0.5, 2.5], sum 4: LOO baselines (4 - G_i)/3 = [1, 4/3, 7/6, 0.5],
    # so A = [0, -4/3, -2/3, 2] = (4/3) x the GRPO-mean advantages [0, -1, -0.5, 1.5].
    rewards = torch.tensor([[1.0], [0.0], [0.5], [2.5]], dtype=torch.float64)
    adv = trloo_advantages(rewards, [7, 7, 7, 7])
    torch.testing.assert_close(adv[:, 0], torch.tensor([0.0, -4 / 3, -2 / 3, 2.0], dtype=torch.float64))


def test_gamma_half_hand_computed() -> None:
    # One group of two trajectories, T = 3, gamma = 0.5.
    # a: r = [1, 2, 4] -> G = [1 + 0.5*2 + 0.25*4, 2 + 0.5*4, 4] = [3, 4, 4]
    # b: r = [0, 2, 0], turn 3 masked -> G = [0 + 0.5*2, 2, (out)] = [1, 2, .]
    # Turn 1: A_a = 3 - 1 = 2, A_b = 1 - 3 = -2. Turn 2: A_a = 4 - 2 = 2, A_b = 2 - 4 = -2.
    # Turn 3: only a is valid (|S| = 1) -> A_a = G = 4; A_b = 0.
    rewards = torch.tensor([[1.0, 2.0, 4.0], [0.0, 2.0, 0.0]])
    mask = torch.tensor([[True, True, True], [True, True, False]])
    torch.testing.assert_close(
        discounted_returns(rewards, mask, gamma=0.5)[0], torch.tensor([3.0, 4.0, 4.0])
    )
    adv = trloo_advantages(rewards, ["q", "q"], mask, gamma=0.5)
    torch.testing.assert_close(adv, torch.tensor([[2.0, 2.0, 4.0], [-2.0, -2.0, 0.0]]))


def test_masked_turn_reward_does_not_reach_earlier_returns() -> None:
    # r = [1, 5, 2] with turn 2 masked: G1 = 1 + 2 = 3 (the 5 is dropped), G3 = 2.
    rewards = torch.tensor([[1.0, 5.0, 2.0]])
    mask = torch.tensor([[True, False, True]])
    assert discounted_returns(rewards, mask)[0, 0].item() == 3.0
    assert discounted_returns(rewards, mask)[0, 2].item() == 2.0


def test_single_trajectory_falls_back_to_return() -> None:
    # N = 1: every cell is a singleton, baseline 0, A = G. r = [1, 2] -> G = [3, 2].
    adv = trloo_advantages(torch.tensor([[1.0, 2.0]]), ["only"])
    torch.testing.assert_close(adv, torch.tensor([[3.0, 2.0]]))


def test_masked_cells_are_exactly_zero_even_with_nan_rewards() -> None:
    rewards, mask = worked_example()
    rewards[3, 1] = float("nan")  # masked cells are ignored, whatever they hold
    adv = trloo_advantages(rewards, ["p"] * 4, mask)
    assert adv[3, 1].item() == 0.0
    assert torch.isfinite(adv).all()


def test_zero_sum_within_full_groups() -> None:
    gen = torch.Generator().manual_seed(3)
    rewards = torch.rand(12, 4, generator=gen, dtype=torch.float64)
    groups = [i // 4 for i in range(12)]  # three full groups of 4
    adv = trloo_advantages(rewards, groups)
    sums = adv.view(3, 4, 4).sum(dim=1)  # (group, turn)
    torch.testing.assert_close(sums, torch.zeros(3, 4, dtype=torch.float64))


@pytest.mark.parametrize("gamma", [1.0, 0.7])
def test_adding_constant_to_a_group_turn_changes_nothing(gamma: float) -> None:
    # Adding c to r_{j,t} of every j in a (full) group shifts G_{j,k} by gamma^(t-k) c for all j
    # alike, for k <= t: each leave-one-out baseline shifts by the same amount, so A is unchanged.
    gen = torch.Generator().manual_seed(5)
    rewards = torch.rand(8, 3, generator=gen, dtype=torch.float64)
    groups = ["a"] * 4 + ["b"] * 4
    shifted = rewards.clone()
    shifted[:4, 2] += 10.0  # group a, turn 3
    shifted[4:, :] += -3.0  # group b, every turn
    torch.testing.assert_close(
        trloo_advantages(shifted, groups, gamma=gamma), trloo_advantages(rewards, groups, gamma=gamma)
    )


def test_group_id_types_give_identical_results() -> None:
    rewards, mask = worked_example()
    rewards = torch.cat([rewards, rewards.flip(0) * 2])
    mask = torch.cat([mask, mask.flip(0)])
    as_str = ["uid-a"] * 4 + ["uid-b"] * 4
    as_int = [10] * 4 + [-3] * 4
    expected = trloo_advantages(rewards, as_str, mask)
    for ids in (as_int, torch.tensor(as_int), np.array(as_int), tuple(as_str), [(1, "x")] * 4 + [(2, "y")] * 4):
        torch.testing.assert_close(trloo_advantages(rewards, ids, mask), expected)


def test_interleaved_groups_and_row_order() -> None:
    # Permuting the rows permutes the advantages: groups are found by id, not by position.
    gen = torch.Generator().manual_seed(11)
    rewards = torch.rand(10, 3, generator=gen, dtype=torch.float64)
    mask = torch.rand(10, 3, generator=gen) < 0.7
    groups = [i % 3 for i in range(10)]
    perm = torch.randperm(10, generator=gen)
    adv = trloo_advantages(rewards, groups, mask)
    adv_perm = trloo_advantages(rewards[perm], [groups[i] for i in perm.tolist()], mask[perm])
    torch.testing.assert_close(adv_perm, adv[perm])


@pytest.mark.parametrize("seed", range(6))
def test_vectorised_matches_loop_reference(seed: int) -> None:
    gen = torch.Generator().manual_seed(seed)
    n = int(torch.randint(1, 40, (1,), generator=gen))
    num_turns = int(torch.randint(1, 6, (1,), generator=gen))
    num_groups = int(torch.randint(1, 8, (1,), generator=gen))
    rewards = torch.randn(n, num_turns, generator=gen, dtype=torch.float64)
    keep_prob = float(torch.rand(1, generator=gen)) * 0.8 + 0.2
    mask = torch.rand(n, num_turns, generator=gen) < keep_prob
    groups = [f"g{int(g)}" for g in torch.randint(0, num_groups, (n,), generator=gen)]
    gamma = [1.0, 0.9, 0.5, 0.0, 1.0, 0.3][seed]
    fast = trloo_advantages(rewards, groups, mask, gamma=gamma)
    slow = _trloo_advantages_loop(rewards, groups, mask, gamma=gamma)
    torch.testing.assert_close(fast, slow, rtol=1e-10, atol=1e-10)


def test_dtype_and_empty_inputs() -> None:
    r32 = torch.rand(4, 2)
    assert trloo_advantages(r32, [0, 0, 1, 1]).dtype == torch.float32
    assert trloo_advantages(r32.double(), [0, 0, 1, 1]).dtype == torch.float64
    assert trloo_advantages(torch.tensor([[1], [3]]), [0, 0]).dtype == torch.get_default_dtype()
    assert trloo_advantages(torch.zeros(0, 3), []).shape == (0, 3)
    all_masked = trloo_advantages(r32, [0, 0, 1, 1], torch.zeros(4, 2, dtype=torch.bool))
    assert (all_masked == 0).all()


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"turn_rewards": torch.zeros(3)}, "2-D"),
        ({"group_ids": [0, 0]}, "len(group_ids)=2 != N=3"),
        ({"turn_mask": torch.ones(3, 2)}, "bool"),
        ({"turn_mask": torch.ones(3, 3, dtype=torch.bool)}, "shape"),
        ({"turn_rewards": torch.tensor([[0.0, 1.0], [float("nan"), 0.0], [0.0, 0.0]])}, "NaN"),
        ({"gamma": 1.5}, "gamma"),
        ({"group_ids": torch.zeros(3, 1, dtype=torch.long)}, "1-D integer"),
    ],
)
def test_input_validation(kwargs: dict, message: str) -> None:
    args = {"turn_rewards": torch.zeros(3, 2), "group_ids": [0, 0, 1], "turn_mask": None, "gamma": 1.0}
    args.update(kwargs)
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        trloo_advantages(**args)


def test_metrics() -> None:
    rewards, mask = worked_example()
    # Add a lone trajectory of another prompt: its 3 valid cells are singletons.
    rewards = torch.cat([rewards, torch.tensor([[1.0, 1.0, 1.0]], dtype=torch.float64)])
    mask = torch.cat([mask, torch.ones(1, 3, dtype=torch.bool)])
    adv, metrics = trloo_advantages_with_metrics(rewards, ["p"] * 4 + ["lone"], mask)
    torch.testing.assert_close(adv, trloo_advantages(rewards, ["p"] * 4 + ["lone"], mask))
    valid = adv[mask]
    # 11 (group) + 3 (lone) = 14 valid cells of 15; 3 of them singletons.
    assert metrics["trloo/valid_frac"] == pytest.approx(14 / 15)
    assert metrics["trloo/singleton_frac"] == pytest.approx(3 / 14)
    # |S| per valid cell: turn 1 and 3 -> 4 each (x8), turn 2 -> 3 (x3), lone -> 1 (x3).
    assert metrics["trloo/group_size_mean"] == pytest.approx((8 * 4 + 3 * 3 + 3 * 1) / 14)
    assert metrics["trloo/adv_mean"] == pytest.approx(valid.mean().item())
    assert metrics["trloo/adv_std"] == pytest.approx(valid.std(correction=0).item())
    # Largest |A|: the lone trajectory's turn 1, A = G = 1 + 1 + 1 = 3 (beats B's -2.9).
    assert metrics["trloo/adv_abs_max"] == pytest.approx(3.0)
    _, empty = trloo_advantages_with_metrics(torch.zeros(2, 2), [0, 0], torch.zeros(2, 2, dtype=torch.bool))
    assert all(v == 0.0 for v in empty.values())


def _bandit_policy_gradient_estimate(
    estimator: str, keep_prob: float | None, gen: torch.Generator
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Softmax bandit, K = 3 arms, groups of N = 4 samples, 200k groups at once.

    pi = softmax(theta), grad_theta log pi(a) = e_a - pi, and with mean reward rbar(a),
    grad J = sum_a pi_a rbar_a (e_a - pi) = pi * (rbar - pi . rbar) in closed form.
    The per-group estimate is (1/N) sum_{i valid} A_i (e_{a_i} - pi).
    Returns (mean estimate, its standard error, true grad J), each (K,).
    """
    num_groups, group_size = 200_000, 4
    theta = torch.tensor([0.5, -0.3, 0.1], dtype=torch.float64)
    pi = theta.softmax(0)
    mean_reward = torch.tensor([1.0, 0.0, 2.0], dtype=torch.float64)
    true_grad = pi * (mean_reward - (pi * mean_reward).sum())

    arms = torch.multinomial(pi, num_groups * group_size, replacement=True, generator=gen)
    noise = 0.5 * torch.randn(num_groups * group_size, generator=gen, dtype=torch.float64)
    rewards = (mean_reward[arms] + noise)[:, None]  # (N_total, T = 1)
    group_ids = torch.arange(num_groups).repeat_interleave(group_size)
    mask = None
    if keep_prob is not None:  # drop samples independently of their action: |S| varies 0..4
        mask = (torch.rand(num_groups * group_size, generator=gen) < keep_prob)[:, None]
    adv = get_advantage(estimator)(rewards, group_ids, mask)[:, 0]
    score = torch.nn.functional.one_hot(arms, 3).double() - pi  # grad log pi(a_i)
    per_group = (adv[:, None] * score).view(num_groups, group_size, 3).mean(dim=1)
    return per_group.mean(0), per_group.std(0) / num_groups**0.5, true_grad


def test_monte_carlo_trloo_unbiased_grpo_scaled_by_n_minus_1_over_n() -> None:
    # Same seed for both estimators: same samples, so the comparison is paired.
    est, se, grad = _bandit_policy_gradient_estimate("trloo", None, torch.Generator().manual_seed(0))
    assert ((est - grad).abs() <= 4 * se).all(), (est, grad, se)  # E = grad J

    est_g, se_g, _ = _bandit_policy_gradient_estimate("grpo", None, torch.Generator().manual_seed(0))
    assert ((est_g - 0.75 * grad).abs() <= 4 * se_g).all(), (est_g, grad, se_g)  # E = (N-1)/N grad J
    assert ((est_g - grad).abs() > 20 * se_g).all()  # the bias is far outside the noise


def test_monte_carlo_with_varying_group_sizes() -> None:
    # Each sample kept with p = 0.6 (independently of its action), N = 4, so |S| ~ Binomial(4, 0.6).
    # TRLOO is unbiased in every cell (|S| = 1 uses baseline 0): E = E|S|/N grad J = 0.6 grad J.
    # GRPO gives (|S|-1) grad J per cell with |S| >= 2 and 1 grad J for |S| = 1:
    # E = (E|S| - P(|S| >= 2))/N grad J, P(|S| >= 2) = 1 - 0.4^4 - 4*0.6*0.4^3 = 0.8208,
    # so E = (2.4 - 0.8208)/4 grad J = 0.3948 grad J: a group-size-dependent shrinkage.
    est, se, grad = _bandit_policy_gradient_estimate("trloo", 0.6, torch.Generator().manual_seed(1))
    assert ((est - 0.6 * grad).abs() <= 4 * se).all(), (est / grad, se)
    est_g, se_g, _ = _bandit_policy_gradient_estimate("grpo", 0.6, torch.Generator().manual_seed(1))
    assert ((est_g - 0.3948 * grad).abs() <= 4 * se_g).all(), (est_g / grad, se_g)


def test_import_does_not_pull_heavy_dependencies() -> None:
    heavy = ("verl", "vllm", "ray", "triton", "transformers")
    code = (
        "import sys\n"
        "import drkernel.advantages.trloo\n"
        "import drkernel.advantages.token_level, drkernel.advantages.hierarchical\n"
        f"print(','.join(m for m in {heavy!r} if m in sys.modules))\n"
    )
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "", f"heavy modules imported: {out.stdout.strip()}"
