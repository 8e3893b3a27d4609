"""Tests for drkernel/correction/importance.py (truncated importance weights)."""

import math

import pytest
import torch

from drkernel.correction.importance import truncated_importance_weights


def _batch():
    # Row 0 (traj "a"): log rho = [ln 3, ln 0.5]     (padding at t=2)
    # Row 1 (traj "a"): log rho = [ln 0.5]
    # Row 2 (traj "b"): log rho = [0, 0, 0]
    rollout = torch.full((3, 3), -2.0, dtype=torch.float64)
    old = rollout.clone()
    old[0, 0] += math.log(3.0)
    old[0, 1] += math.log(0.5)
    old[1, 0] += math.log(0.5)
    old[0, 2] = 100.0  # padding garbage
    mask = torch.tensor([[1, 1, 0], [1, 0, 0], [1, 1, 1]], dtype=torch.bool)
    return old, rollout, mask, ["a", "a", "b"]


def test_token_level_truncates_each_token():
    # rho = 3 -> min(3, 2) = 2; 0.5 stays; padding -> 0.
    old, rollout, mask, ids = _batch()
    w, m = truncated_importance_weights(old, rollout, mask, ids, level="token", upper=2.0)
    expected = torch.tensor([[2.0, 0.5, 0.0], [0.5, 0.0, 0.0], [1.0, 1.0, 1.0]], dtype=torch.float64)
    assert torch.allclose(w, expected)
    # 6 valid tokens, one (rho = 3) above U
    assert m["mismatch/is_truncated_frac"] == pytest.approx(1 / 6)
    assert m["mismatch/is_max"] == pytest.approx(2.0)
    assert m["mismatch/is_min"] == pytest.approx(0.5)
    # mean of [2, .5, .5, 1, 1, 1] = 6/6 = 1
    assert m["mismatch/is_mean"] == pytest.approx(1.0)


def test_turn_level_uses_the_row_product():
    # row 0: exp(ln 3 + ln 0.5) = 1.5 (< 2, not truncated); row 1: 0.5; row 2: 1.
    old, rollout, mask, ids = _batch()
    w, m = truncated_importance_weights(old, rollout, mask, ids, level="turn", upper=2.0)
    expected = torch.tensor([[1.5, 1.5, 0.0], [0.5, 0.0, 0.0], [1.0, 1.0, 1.0]], dtype=torch.float64)
    assert torch.allclose(w, expected)
    assert m["mismatch/is_truncated_frac"] == 0.0
    # ESS of the 3 row weights [1.5, .5, 1]: (3)^2 / (3 * (2.25 + .25 + 1)) = 9 / 10.5
    assert m["mismatch/is_ess"] == pytest.approx(9 / 10.5)


def test_trajectory_level_and_truncation():
    # traj "a": exp(ln 3 + ln .5 + ln .5) = 0.75 on both rows; traj "b": 1.
    old, rollout, mask, ids = _batch()
    w, _ = truncated_importance_weights(old, rollout, mask, ids, level="trajectory", upper=2.0)
    expected = torch.tensor([[0.75, 0.75, 0.0], [0.75, 0.0, 0.0], [1.0, 1.0, 1.0]], dtype=torch.float64)
    assert torch.allclose(w, expected)
    # With U = 0.6, traj "a" (0.75) and "b" (1.0) are both truncated to 0.6.
    w, m = truncated_importance_weights(old, rollout, mask, ids, level="sequence", upper=0.6)
    assert torch.allclose(w, 0.6 * mask.double())
    assert m["mismatch/is_truncated_frac"] == 1.0


def test_weights_are_detached_dtype_preserved_and_clamped():
    old = torch.tensor([[500.0, -500.0]], requires_grad=True)
    rollout = torch.zeros(1, 2)
    mask = torch.ones(1, 2, dtype=torch.bool)
    w, m = truncated_importance_weights(old, rollout, mask, level="token", upper=2.0)
    # log rho = +500 -> clamp 20 -> e^20, truncated to 2; -500 -> e^-20 = 2.06e-9
    assert not w.requires_grad and w.dtype == torch.float32
    assert w[0, 0].item() == pytest.approx(2.0)
    assert w[0, 1].item() == pytest.approx(math.exp(-20.0), rel=1e-5)
    assert all(math.isfinite(v) for v in m.values())


def test_unknown_level():
    old, rollout, mask, ids = _batch()
    with pytest.raises(ValueError, match="known: token, turn, trajectory"):
        truncated_importance_weights(old, rollout, mask, ids, level="row")
