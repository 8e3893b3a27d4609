"""Tests for drkernel/correction/stats.py (KL, ESS, rejected fractions, perplexities)."""

import math

import pytest
import torch

from drkernel.correction.stats import effective_sample_size, mismatch_stats, rejection_fractions


def test_ess_of_known_weights():
    # equal weights -> 1
    assert effective_sample_size(torch.tensor([2.0, 2.0, 2.0])) == pytest.approx(1.0)
    # [4, 0, 0, 0]: (4)^2 / (4 * 16) = 0.25 (one sample carries everything: 1/n)
    assert effective_sample_size(torch.tensor([4.0, 0.0, 0.0, 0.0])) == pytest.approx(0.25)
    # [1, 2, 3]: 36 / (3 * 14) = 6/7
    assert effective_sample_size(torch.tensor([1.0, 2.0, 3.0])) == pytest.approx(6 / 7)
    # masked: only [1, 3] count -> 16 / (2 * 10) = 0.8
    w = torch.tensor([[1.0, 100.0], [3.0, 7.0]])
    assert effective_sample_size(w, torch.tensor([[True, False], [True, False]])) == pytest.approx(0.8)
    assert math.isnan(effective_sample_size(torch.zeros(3)))
    assert math.isnan(effective_sample_size(torch.ones(2), torch.zeros(2, dtype=torch.bool)))


def test_kl_and_log_ratio_stats():
    # One row, valid log rho = [ln 2, 0] (rollout log-probs [-2, -1], old [-2 + ln 2, -1]).
    # k1 = mean(-log rho) = -ln2 / 2 = -0.34657
    # k3 = mean(rho - 1 - log rho) = ((2 - 1 - ln 2) + 0) / 2 = 0.15343
    rollout = torch.tensor([[-2.0, -1.0, -1.0]], dtype=torch.float64)
    old = torch.tensor([[-2.0 + math.log(2.0), -1.0, 3.0]], dtype=torch.float64)
    mask = torch.tensor([[True, True, False]])
    m = mismatch_stats(old, rollout, mask)
    assert m["mismatch/num_tokens"] == 2
    assert m["mismatch/kl_k1"] == pytest.approx(-math.log(2) / 2)
    assert m["mismatch/kl_k3"] == pytest.approx((1 - math.log(2)) / 2)
    assert m["mismatch/log_ratio_min"] == pytest.approx(0.0)
    assert m["mismatch/log_ratio_max"] == pytest.approx(math.log(2))
    # ppl_rollout = exp(-(-2 - 1)/2) = e^1.5; ppl_old = exp(-(-2 + ln2 - 1)/2) = e^1.5 / sqrt(2)
    assert m["mismatch/ppl_rollout"] == pytest.approx(math.exp(1.5))
    assert m["mismatch/ppl_old"] == pytest.approx(math.exp(1.5) / math.sqrt(2))
    # log ppl_old - log ppl_rollout = -mean log rho = -ln2/2
    assert m["mismatch/log_ppl_diff"] == pytest.approx(-math.log(2) / 2)
    # token ESS of rho = [2, 1]: 9 / (2 * 5) = 0.9; one row / one trajectory -> ESS 1
    assert m["mismatch/ess_token"] == pytest.approx(0.9)
    assert m["mismatch/ess_turn"] == pytest.approx(1.0)
    assert m["mismatch/ess_traj"] == pytest.approx(1.0)


def test_turn_and_trajectory_ess():
    # rows with log rho sums ln 2, ln 2 (traj 0) and 0 (traj 1):
    # turn weights [2, 2, 1]: 25 / (3 * 9) = 25/27; trajectory weights [4, 1]: 25 / (2 * 17) = 25/34
    rollout = torch.zeros(3, 1, dtype=torch.float64)
    old = torch.tensor([[math.log(2)], [math.log(2)], [0.0]], dtype=torch.float64)
    mask = torch.ones(3, 1, dtype=torch.bool)
    m = mismatch_stats(old, rollout, mask, [0, 0, 1])
    assert m["mismatch/ess_turn"] == pytest.approx(25 / 27)
    assert m["mismatch/ess_traj"] == pytest.approx(25 / 34)


def test_extreme_inputs_give_finite_stats():
    # |log rho| = 1e4 is clamped to 20: rho in {e^20, e^-20}; every stat is finite.
    # log rho = old - rollout = [[1e4, -1e4], [-1.0, 1e4]]
    rollout = torch.tensor([[-1e4, 0.0], [0.0, -1e4]], dtype=torch.float64)
    old = torch.tensor([[0.0, -1e4], [-1.0, 0.0]], dtype=torch.float64)
    mask = torch.ones(2, 2, dtype=torch.bool)
    m = mismatch_stats(old, rollout, mask, [0, 0])
    assert m["mismatch/log_ratio_max"] == 20.0 and m["mismatch/log_ratio_min"] == -20.0
    for key, value in m.items():
        if not key.startswith("mismatch/ppl"):  # ppl is exp(-mean log p), e^5000 overflows honestly
            assert math.isfinite(value), key


def test_empty_batch_gives_nan():
    z = torch.zeros(2, 3)
    m = mismatch_stats(z, z, torch.zeros(2, 3, dtype=torch.bool))
    assert m["mismatch/num_tokens"] == 0
    assert math.isnan(m["mismatch/kl_k1"]) and math.isnan(m["mismatch/ess_traj"])


def test_rejection_fractions():
    # rows: 0 (traj a) 2 tokens -> 0; 1 (traj a) 1 token kept; 2 (traj b) 2 tokens -> 1; 3 empty.
    before = torch.tensor([[1, 1], [1, 0], [1, 1], [0, 0]], dtype=torch.bool)
    after = torch.tensor([[0, 0], [1, 0], [1, 0], [0, 0]], dtype=torch.bool)
    m = rejection_fractions(before, after, ["a", "a", "b", "c"], prefix="x/")
    # tokens: 3 of 5 removed; turns: row 0 of 3 non-empty rows; trajectories: none of a, b fully
    # removed (c is empty and not counted)
    assert m == {"x/rejected_token_frac": pytest.approx(0.6), "x/rejected_turn_frac": pytest.approx(1 / 3),
                 "x/rejected_traj_frac": 0.0}
