"""Tests for drkernel/rewards/functions.py (speedup, weighted and tiered rewards, PR)."""

import math
from dataclasses import dataclass

import pytest
import torch

from drkernel.rewards.functions import (
    RewardConfig,
    compute_reward,
    compute_rewards,
    get_reward_fn,
    outcome_tensors,
    speedup_reward,
    tiered_reward,
    weighted_reward,
)


def test_speedup_reward_reference_vectors_scalar():
    # Recipe: R = 0.5 c + 0.5 min(s, 3) + 0.5 c cov
    assert speedup_reward(True, 2.0, 0.6) == pytest.approx(1.8)  # 0.5 + 0.5*2.0 + 0.5*0.6
    assert speedup_reward(True, 5.0, 0.2) == pytest.approx(2.1)  # 0.5 + 0.5*3.0 (clipped) + 0.5*0.2
    assert speedup_reward(True, 0.4, 0.0) == pytest.approx(0.7)  # 0.5 + 0.5*0.4 + 0
    assert speedup_reward(False, 0.0, 0.0) == 0.0  # incorrect
    assert isinstance(speedup_reward(True, 2.0, 0.6), float)


def test_speedup_reward_vectorised_matches_scalars():
    correct = torch.tensor([True, True, True, False])
    speedup = torch.tensor([2.0, 5.0, 0.4, 1.7])  # the incorrect kernel's speedup must not count
    coverage = torch.tensor([0.6, 0.2, 0.0, 0.9])
    r = speedup_reward(correct, speedup, coverage)
    assert r.dtype == torch.float64 and r.shape == (4,)
    assert torch.allclose(r, torch.tensor([1.8, 2.1, 0.7, 0.0], dtype=torch.float64))
    # (N, T) batches broadcast as well
    r2 = speedup_reward(correct.reshape(2, 2), speedup.reshape(2, 2), coverage.reshape(2, 2))
    assert torch.allclose(r2.flatten(), r)


def test_speedup_reward_hacked_lower_bound_and_missing_values():
    # hacked -> penalty regardless of a great kernel
    assert speedup_reward(True, 2.9, 1.0, hacked=True) == 0.0
    assert speedup_reward(True, 2.9, 1.0, hacked=True, penalty=-1.0) == -1.0
    # lower bound 1.0: s = 0.8 counts 0 (not 1.0): 0.5 + 0 + 0.5*0.5 = 0.75
    assert speedup_reward(True, 0.8, 0.5, speedup_lower=1.0) == pytest.approx(0.75)
    # speedup None / NaN and coverage None count 0: 0.5
    assert speedup_reward(True, None, None) == pytest.approx(0.5)
    assert speedup_reward(True, float("nan"), float("nan")) == pytest.approx(0.5)
    # coverage disabled: 0.5 + 0.5*2 = 1.5
    assert speedup_reward(True, 2.0, 0.6, coverage_enable=False) == pytest.approx(1.5)
    # not compiled cannot be correct
    assert speedup_reward(True, 2.0, 0.6, compiled=False) == 0.0


def test_weighted_reward():
    # R = 0.5 c + 0.5 c [s >= 1.01] + 0.5 c cov
    assert weighted_reward(True, 1.005, 0.4) == pytest.approx(0.7)  # 0.5 + 0 + 0.2
    assert weighted_reward(True, 1.01, 0.4) == pytest.approx(1.2)  # 0.5 + 0.5 + 0.2
    assert weighted_reward(False, 2.0, 0.4) == 0.0
    assert weighted_reward(True, 2.0, 0.4, hacked=True) == 0.0


def test_tiered_reward():
    assert tiered_reward(True, 3.0) == 1.0
    assert tiered_reward(True, 2.5) == 0.8
    assert tiered_reward(True, 1.5) == 0.6
    assert tiered_reward(True, 1.2) == 0.4  # exactly on the tier counts (>=)
    assert tiered_reward(True, 1.19) == 0.2
    assert tiered_reward(True, 0.9) == -0.1  # perf_degrade
    assert tiered_reward(False, 5.0) == -0.3  # compiled but incorrect
    assert tiered_reward(False, None, compiled=False) == -0.5
    assert tiered_reward(True, 5.0, hacked=True) == -1.0
    r = tiered_reward(torch.tensor([True, False]), torch.tensor([2.0, 2.0]))
    assert torch.allclose(r, torch.tensor([0.8, -0.3], dtype=torch.float64))


@dataclass
class _Result:
    compiled: bool
    correct: bool
    hacked: bool
    speedup: float | None
    coverage: float | None


def test_compute_rewards_from_results_dicts_and_objects():
    results = [
        {"compiled": True, "correct": True, "hacked": False, "speedup": 2.0, "coverage": 0.6},  # 1.8
        _Result(True, True, False, 5.0, 0.2),  # 2.1
        _Result(True, True, True, 2.0, 0.9),  # hacked -> 0
        {"compiled": False, "correct": False, "speedup": None, "coverage": None},  # 0
    ]
    r = compute_rewards(results)
    assert torch.allclose(r, torch.tensor([1.8, 2.1, 0.0, 0.0], dtype=torch.float64))
    assert compute_reward(results[0]) == pytest.approx(1.8)
    assert compute_reward(results[0], RewardConfig(name="tiered")) == 0.8
    t = outcome_tensors(results)
    assert t["hacked"].tolist() == [False, False, True, False]
    assert math.isnan(t["speedup"][3].item())
    with pytest.raises(KeyError):
        outcome_tensors([{"speedup": 1.0}])


def test_config_and_registry():
    cfg = RewardConfig()
    assert (cfg.name, cfg.correct_weight, cfg.performance_weight, cfg.speedup_upper, cfg.speedup_lower,
            cfg.coverage_enable, cfg.coverage_weight, cfg.penalty) == ("speedup", 0.5, 0.5, 3.0, 0.0, True, 0.5, 0.0)
    assert "speedup_eps" not in cfg.knobs() and "speedup_upper" in cfg.knobs()
    with pytest.raises(ValueError, match="known: 'speedup', 'tiered', 'weighted'"):
        get_reward_fn("calculate_reward_speedup")
    with pytest.raises(ValueError):
        RewardConfig(name="nope")


def test_float32_speedups_meet_tiers_at_their_own_precision():
    # float32(1.3) = 1.2999999523; a 1.3 tier must still count it, and the result is float64.
    r = tiered_reward(torch.tensor([True]), torch.tensor([1.3], dtype=torch.float32), tiers=((1.3, 0.5),))
    assert r.dtype == torch.float64 and r.tolist() == [0.5]
    # a scalar `correct` with a float32 speedup batch still gives float64 rewards:
    # 0.5 + 0.5 * 0.3 = 0.65 exactly in float64 arithmetic (up to float32(0.3))
    r = speedup_reward(True, torch.tensor([0.3], dtype=torch.float32), None)
    assert r.dtype == torch.float64 and r.item() == pytest.approx(0.65)


def test_python_floats_are_computed_in_float64_exactly():
    # torch.as_tensor(0.6) is float32 (0.6000000238): the recipe's 1.8 came out 1.800000011920929.
    assert speedup_reward(True, 2.0, 0.6) == 1.8  # exact, not approx
    assert speedup_reward([True, True], [2.0, 5.0], [0.6, 0.2]).tolist() == [1.8, 2.1]
    assert weighted_reward(True, 1.01, 0.4) == 1.2
    # a float32 tensor keeps its precision: its 0.6 really is 0.6000000238
    r = speedup_reward(torch.tensor(True), torch.tensor(2.0), torch.tensor(0.6, dtype=torch.float32))
    assert r.item() == 1.5 + 0.5 * float(torch.tensor(0.6, dtype=torch.float32))
