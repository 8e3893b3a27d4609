"""Tests for drkernel/rewards/prs.py (profiling-based rejection sampling)."""

import dataclasses
import math

import pytest
import torch

from drkernel.rewards.prs import PRSConfig, prs_keep_mask


def _draw(coverage, correct, n=4000, seed=0, **knobs):
    """Repeat one (trajectory, turn) n times and return the kept fraction."""
    cov = torch.full((n, 1), coverage, dtype=torch.float64)
    ok = torch.full((n, 1), correct)
    keep, _ = prs_keep_mask(cov, ok, generator=torch.Generator().manual_seed(seed), **knobs)
    return keep.double().mean().item()


def test_recipe_thresholds():
    # p = clamp((x - 0.3) / 0.1, 0, 1)
    assert _draw(0.30, True) == 0.0  # p = 0: always rejected
    assert _draw(0.20, True) == 0.0
    assert _draw(0.40, True) == 1.0  # p = 1: always kept
    assert _draw(0.95, True) == 1.0
    # p = 0.5: 4000 Bernoulli(0.5) draws have std 0.0079; 0.5 +- 0.03 is about 4 sigma
    assert _draw(0.35, True) == pytest.approx(0.5, abs=0.03)
    # p = 0.25 at coverage 0.325
    assert _draw(0.325, True) == pytest.approx(0.25, abs=0.03)


def test_incorrect_turns_always_kept():
    assert _draw(0.0, False) == 1.0
    assert _draw(0.35, False) == 1.0


def test_hard_cut_without_factor_needs_no_generator():
    # f = 0 or None: p = 1[x >= theta]; 0.3 is kept (>=), 0.29 rejected; no randomness needed.
    cov = torch.tensor([[0.3, 0.29, 0.1]], dtype=torch.float64)
    ok = torch.tensor([[True, True, False]])
    for factor in (0.0, None):
        keep, m = prs_keep_mask(cov, ok, factor=factor)
        assert keep.tolist() == [[True, False, True]]
    # 1 of 3 valid turns rejected; 1 of 2 correct ones
    assert m["prs/masked_frac"] == pytest.approx(1 / 3)
    assert m["prs/correct_masked_frac"] == pytest.approx(0.5)
    assert m["prs/traj_masked_frac"] == 1.0
    # coverage stats over correct turns [0.3, 0.29]
    assert m["prs/coverage_mean"] == pytest.approx(0.295)
    assert m["prs/coverage_min"] == pytest.approx(0.29) and m["prs/coverage_max"] == pytest.approx(0.3)
    with pytest.raises(ValueError, match="Generator"):
        prs_keep_mask(torch.tensor([[0.35]], dtype=torch.float64), torch.tensor([[True]]))


def test_speedup_threshold_is_ored_in():
    # coverage 0.1 (p = 0) but speedup 2.0 >= s* = 1.5 -> kept; speedup 1.0 or NaN -> rejected.
    cov = torch.full((1, 3), 0.1, dtype=torch.float64)
    ok = torch.ones(1, 3, dtype=torch.bool)
    speedup = torch.tensor([[2.0, 1.0, float("nan")]])
    g = torch.Generator().manual_seed(0)
    keep, _ = prs_keep_mask(cov, ok, speedup=speedup, speedup_threshold=1.5, generator=g)
    assert keep.tolist() == [[True, False, False]]
    # None or negative disables it
    for s_star in (None, -1.0):
        keep, _ = prs_keep_mask(cov, ok, speedup=speedup, speedup_threshold=s_star, generator=g)
        assert not keep.any()


def test_geometric_modes_and_reference_bug():
    # Trajectory: turn 1 incorrect (cov 0 -> 1e-8), turns 2, 3 correct with cov 0.5 and 0.8.
    # geometric (reference): exp((ln 1e-8 + ln .5 + ln .8)/3) = (1e-8 * 0.4)^(1/3) = 1.59e-3 < 0.3:
    #   both correct turns rejected (reference bug §9.16). The incorrect turn is kept.
    # geometric_correct: sqrt(0.5 * 0.8) = 0.632 >= 0.4 -> p = 1, all kept.
    cov = torch.tensor([[0.0, 0.5, 0.8]], dtype=torch.float64)
    ok = torch.tensor([[False, True, True]])
    g = torch.Generator().manual_seed(0)
    keep, _ = prs_keep_mask(cov, ok, mode="geometric", generator=g)
    assert keep.tolist() == [[True, False, False]]
    keep, _ = prs_keep_mask(cov, ok, mode="geometric_correct", generator=g)
    assert keep.tolist() == [[True, True, True]]
    # turn mode: 0.5 and 0.8 are both >= 0.4
    keep, _ = prs_keep_mask(cov, ok, mode="turn", generator=g)
    assert keep.all()


def test_geometric_uses_only_valid_turns():
    # cov [0.9, 0.1] with turn 2 already rejected (no valid tokens): geometric over turn 1 only
    # = 0.9 -> kept; turn 2 comes back False because it was invalid.
    # With both valid: sqrt(0.09) = 0.3 -> p = 0 -> both rejected.
    cov = torch.tensor([[0.9, 0.1]], dtype=torch.float64)
    ok = torch.ones(1, 2, dtype=torch.bool)
    g = torch.Generator().manual_seed(0)
    keep, m = prs_keep_mask(cov, ok, torch.tensor([[True, False]]), mode="geometric", generator=g)
    assert keep.tolist() == [[True, False]]
    assert m["prs/masked_frac"] == 0.0
    keep, _ = prs_keep_mask(cov, ok, mode="geometric", generator=g)
    assert keep.tolist() == [[False, False]]


def test_seeded_generator_is_reproducible():
    cov = torch.full((50, 3), 0.35, dtype=torch.float64)
    ok = torch.ones(50, 3, dtype=torch.bool)
    a, _ = prs_keep_mask(cov, ok, generator=torch.Generator().manual_seed(7))
    b, _ = prs_keep_mask(cov, ok, generator=torch.Generator().manual_seed(7))
    c, _ = prs_keep_mask(cov, ok, generator=torch.Generator().manual_seed(8))
    assert a.equal(b) and not a.equal(c)


def test_config_defaults_and_kwargs():
    cfg = PRSConfig()
    assert (cfg.threshold, cfg.factor, cfg.mode, cfg.speedup_threshold) == (0.3, 0.1, "turn", None)
    cov = torch.tensor([[0.45]], dtype=torch.float64)
    keep, _ = prs_keep_mask(cov, torch.tensor([[True]]), **dataclasses.asdict(cfg))
    assert keep.item()
    with pytest.raises(ValueError, match="known: turn"):
        PRSConfig(mode="traj")


def test_empty_metrics_are_nan():
    keep, m = prs_keep_mask(torch.zeros(2, 2), torch.zeros(2, 2, dtype=torch.bool),
                            torch.zeros(2, 2, dtype=torch.bool))
    assert not keep.any()
    assert math.isnan(m["prs/masked_frac"]) and math.isnan(m["prs/coverage_mean"])


def test_float32_coverage_at_the_threshold_is_rejected():
    # float32(0.3) = 0.30000001 > 0.3 in float64 would give p = 1.2e-7; at float32 precision
    # (x - theta) = 0 exactly, so p = 0 and no generator is even needed.
    cov = torch.full((3, 2), 0.3, dtype=torch.float32)
    keep, _ = prs_keep_mask(cov, torch.ones(3, 2, dtype=torch.bool))
    assert not keep.any()


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_top_of_the_ramp_keeps_surely_without_generator(dtype):
    # (0.4 - 0.3) / 0.1 = 0.9999999999999998 naively: p < 1 demanded a generator. Now p = 1.
    cov = torch.tensor([[0.4, 0.3, 0.9, 0.1]], dtype=dtype)
    keep, m = prs_keep_mask(cov, torch.ones(1, 4, dtype=torch.bool))
    assert keep.tolist() == [[True, False, True, False]]
    assert m["prs/keep_prob_mean"] == 0.5  # p = [1, 0, 1, 0] exactly


def test_ramp_end_points_survive_rounding_of_theta_plus_f():
    # 0.2 + 0.1 = 0.30000000000000004 > 0.3, yet x = 0.3 is the top of the ramp: p = 1.
    keep, _ = prs_keep_mask(torch.tensor([[0.3]], dtype=torch.float64), torch.tensor([[True]]),
                            threshold=0.2, factor=0.1)
    assert keep.item()
    # inside the ramp the generator is still required
    with pytest.raises(ValueError, match="Generator"):
        prs_keep_mask(torch.tensor([[0.39]], dtype=torch.float64), torch.tensor([[True]]))
