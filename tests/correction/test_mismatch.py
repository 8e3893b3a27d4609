"""Tests for drkernel/correction/mismatch.py (the composed MRS + veto + TIS entry point)."""

import math

import pytest
import torch

from drkernel.correction.mismatch import MismatchConfig, apply_mismatch_correction


def _rows(log_rhos, length=3):
    n = len(log_rhos)
    rollout = torch.full((n, length), -1.0, dtype=torch.float64)
    old = rollout.clone()
    mask = torch.zeros(n, length, dtype=torch.bool)
    for i, values in enumerate(log_rhos):
        old[i, : len(values)] += torch.tensor(values, dtype=torch.float64)
        mask[i, : len(values)] = True
    return old, rollout, mask


def test_recipe_defaults():
    cfg = MismatchConfig()
    assert (cfg.rs, cfg.rs_lower, cfg.rs_upper, cfg.token_veto, cfg.is_level, cfg.is_upper) == (
        "geometric", 0.999, 1.001, 1e-4, None, 2.0)


def test_recipe_composes_geometric_rs_and_veto():
    # traj "a": rows 0, 1 with log rho [0.0005, 0.0005] | [0.0005] -> mean 0.0005, kept by RS.
    # traj "b": row 2 [0.002] -> w = e^0.002 > 1.001, rejected by RS.
    # traj "c": rows 3, 4 with [0.0, -20.0] | [6.67] -> mean (0 - 20 + 6.67)/3 = -4.44, rejected
    #   by RS; row 3 is also vetoed (-20 < ln 1e-4 = -9.21).
    # traj "e": rows 5, 6 with [0.0, -10.0] | [10.0, 0.0] -> mean 0, kept by RS; row 5 vetoed
    #   (-10 < -9.21), row 6 survives.
    old, rollout, mask = _rows([[0.0005, 0.0005], [0.0005], [0.002], [0.0, -20.0], [6.67],
                                [0.0, -10.0], [10.0, 0.0]])
    ids = ["a", "a", "b", "c", "c", "e", "e"]
    new_mask, weights, m = apply_mismatch_correction(old, rollout, mask, ids)
    assert weights is None
    keep_rows = new_mask.any(dim=-1).tolist()
    assert keep_rows == [True, True, False, False, False, False, True]
    assert new_mask[6].equal(mask[6])
    # RS rejected trajectories b, c of {a, b, c, e}: 2/4; veto rejected rows 3 and 5 of 7
    assert m["mismatch/rs_rejected_traj_frac"] == pytest.approx(0.5)
    assert m["mismatch/veto_rejected_turn_frac"] == pytest.approx(2 / 7)
    # combined: rows 2, 3, 4, 5 of 7 rejected; trajectories b, c of 4 fully rejected (e keeps row 6)
    assert m["mismatch/rejected_turn_frac"] == pytest.approx(4 / 7)
    assert m["mismatch/rejected_traj_frac"] == pytest.approx(0.5)
    assert "mismatch/kl_k3" in m and "mismatch/ess_token" in m


def test_veto_works_without_rs():
    # Reference §2.2 bug: the veto alone was ignored. Here rs=None still applies it.
    old, rollout, mask = _rows([[0.0, -10.0], [0.3]])
    new_mask, _, m = apply_mismatch_correction(old, rollout, mask, [0, 1], MismatchConfig(rs=None))
    assert not new_mask[0].any() and new_mask[1].equal(mask[1])
    assert not any(k.startswith("mismatch/rs_") for k in m)


def test_veto_sees_tokens_that_token_rs_removed():
    # Token RS [0.5, 2] drops the token with log rho -10 (rho 4.5e-5) but the veto still rejects
    # the whole turn, including the token 0.0 that token RS kept.
    old, rollout, mask = _rows([[0.0, -10.0]])
    new_mask, _, _ = apply_mismatch_correction(
        old, rollout, mask, None, MismatchConfig(rs="token", rs_lower=0.5, rs_upper=2.0))
    assert not new_mask.any()


def test_everything_off_returns_the_input_mask():
    old, rollout, mask = _rows([[5.0, -15.0]])
    new_mask, weights, m = apply_mismatch_correction(
        old, rollout, mask, None, MismatchConfig(rs=None, token_veto=None))
    assert new_mask.equal(mask) and weights is None
    assert m["mismatch/rejected_token_frac"] == 0.0


def test_is_weights_are_masked_by_the_final_mask():
    # Row 0: log rho [ln 1.5, 0] (turn weight 1.5), kept; row 1: [ln 3] -> 3 truncated to 2, but
    # vetoed? no (3 > 1e-4); rejected by turn RS [0.5, 2]? w = 3 > 2 yes -> weight 0.
    old, rollout, mask = _rows([[math.log(1.5), 0.0], [math.log(3.0)]])
    cfg = MismatchConfig(rs="turn", rs_lower=0.5, rs_upper=2.0, is_level="turn", is_upper=2.0)
    new_mask, weights, m = apply_mismatch_correction(old, rollout, mask, None, cfg)
    expected = torch.tensor([[1.5, 1.5, 0.0], [0.0, 0.0, 0.0]], dtype=torch.float64)
    assert torch.allclose(weights, expected)
    assert m["mismatch/is_truncated_frac"] == pytest.approx(0.5)  # 1 of 2 rows had w > U


def test_bad_config():
    with pytest.raises(ValueError, match="known"):
        MismatchConfig(rs="geo")
    with pytest.raises(ValueError, match="known"):
        MismatchConfig(is_level="row")
