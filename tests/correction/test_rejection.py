"""Tests for drkernel/correction/rejection.py (mismatch rejection sampling and token veto)."""

import math

import pytest
import torch

from drkernel.correction.rejection import RS_MODES, rejection_mask, token_veto_mask


def _rows(log_rhos, length=4):
    """Build (old, rollout, mask) rows whose valid tokens have the given log rho values.

    rollout log-probs are -1.0 everywhere (padding too), old = rollout + log rho on valid tokens.
    """
    n = len(log_rhos)
    rollout = torch.full((n, length), -1.0, dtype=torch.float64)
    old = rollout.clone()
    mask = torch.zeros(n, length, dtype=torch.bool)
    for i, values in enumerate(log_rhos):
        k = len(values)
        old[i, :k] += torch.tensor(values, dtype=torch.float64)
        mask[i, :k] = True
    return old, rollout, mask


def test_geometric_recipe_bounds_keep_0008_reject_0012():
    # Trajectory 0: rows 0, 1 with log rho 0.0006, 0.0010 | 0.0008  -> mean 0.0024/3 = 0.0008,
    #   w = e^0.0008 = 1.00080 in [0.999, 1.001]: kept (both turns).
    # Trajectory 1: rows 2, 3 with log rho 0.0012, 0.0012 | 0.0012 -> mean 0.0012,
    #   w = e^0.0012 = 1.00120 > 1.001: rejected, every turn of it.
    old, rollout, mask = _rows([[0.0006, 0.0010], [0.0008], [0.0012, 0.0012], [0.0012]])
    new_mask, m = rejection_mask(old, rollout, mask, ["a", "a", "b", "b"], mode="geometric",
                                 lower=0.999, upper=1.001)
    assert new_mask[:2].equal(mask[:2])
    assert not new_mask[2:].any()
    # 3 of 6 valid tokens, 2 of 4 turns, 1 of 2 trajectories rejected.
    assert m["mismatch/rs_rejected_token_frac"] == pytest.approx(0.5)
    assert m["mismatch/rs_rejected_turn_frac"] == pytest.approx(0.5)
    assert m["mismatch/rs_rejected_traj_frac"] == pytest.approx(0.5)
    # ratios: e^0.0008 and e^0.0012
    assert m["mismatch/rs_ratio_min"] == pytest.approx(math.exp(0.0008))
    assert m["mismatch/rs_ratio_max"] == pytest.approx(math.exp(0.0012))
    assert m["mismatch/rs_above_upper_frac"] == pytest.approx(0.5)
    assert m["mismatch/rs_below_lower_frac"] == 0.0


def test_geometric_is_trajectory_level_not_turn_level():
    # Rows of one trajectory: log rho means 0.0030 (1 token) and -0.0010 (3 tokens).
    # Turn-level geo: row 0 w = e^0.003 rejected, row 1 w = e^-0.001 = 0.9990005 >= 0.999 kept.
    # Trajectory geo: (0.003 - 0.003)/4 = 0 -> w = 1, both kept.
    old, rollout, mask = _rows([[0.003], [-0.001, -0.001, -0.001]])
    traj_mask, _ = rejection_mask(old, rollout, mask, [7, 7], mode="geometric")
    assert traj_mask.equal(mask)
    turn_mask, m = rejection_mask(old, rollout, mask, [7, 7], mode="turn_geo")
    assert turn_mask[1].equal(mask[1]) and not turn_mask[0].any()
    # one of two turns rejected; the trajectory keeps a turn, so it is not rejected
    assert m["mismatch/rs_rejected_turn_frac"] == 0.5
    assert m["mismatch/rs_rejected_traj_frac"] == 0.0


def test_sum_modes_and_token_mode():
    # Row log rhos [0.5, 0.5] and [0.1, -0.1], bounds [0.5, 2]:
    # token: e^0.5 = 1.65, e^0.1, e^-0.1 all in [0.5, 2] -> nothing rejected.
    # turn: row 0 e^1.0 = 2.72 > 2 rejected; row 1 e^0 = 1 kept.
    # sequence (one trajectory): e^(1.0 + 0) = 2.72 -> whole trajectory rejected.
    # sequence (no traj_ids = single-turn): same as turn.
    old, rollout, mask = _rows([[0.5, 0.5], [0.1, -0.1]])
    tok, _ = rejection_mask(old, rollout, mask, mode="token", lower=0.5, upper=2.0)
    assert tok.equal(mask)
    turn, _ = rejection_mask(old, rollout, mask, mode="turn", lower=0.5, upper=2.0)
    assert turn.tolist()[0] == [False] * 4 and turn[1].equal(mask[1])
    seq, _ = rejection_mask(old, rollout, mask, [0, 0], mode="sequence", lower=0.5, upper=2.0)
    assert not seq.any()
    single, _ = rejection_mask(old, rollout, mask, None, mode="sequence", lower=0.5, upper=2.0)
    assert single.equal(turn)


def test_token_mode_masks_single_tokens_and_lower_defaults_to_inverse_upper():
    # upper 2, lower None -> 1/2. log rho: ln 3 (rho 3 > 2), ln 0.4 (0.4 < 0.5), 0 (kept).
    old, rollout, mask = _rows([[math.log(3.0), math.log(0.4), 0.0]])
    new_mask, m = rejection_mask(old, rollout, mask, mode="token", lower=None, upper=2.0)
    assert new_mask.tolist() == [[False, False, True, False]]
    assert m["mismatch/rs_rejected_token_frac"] == pytest.approx(2 / 3)
    assert m["mismatch/rs_rejected_turn_frac"] == 0.0  # the row keeps one token


def test_empty_rows_and_trajectories_are_kept_and_not_counted():
    # Row 0 has no valid token (its own trajectory "p"); trajectory "q" has a rejected row.
    # Denominators count only non-empty units: 1 turn, 1 trajectory, both rejected -> 1.0.
    old, rollout, mask = _rows([[], [0.01]])
    old[0] = 5.0  # garbage under padding must not matter
    new_mask, m = rejection_mask(old, rollout, mask, ["p", "q"], mode="geometric")
    assert not new_mask.any()
    assert m["mismatch/rs_rejected_turn_frac"] == 1.0
    assert m["mismatch/rs_rejected_traj_frac"] == 1.0
    # With bounds that exclude w = 1, an all-empty batch is still untouched and metrics are nan.
    empty = torch.zeros_like(mask)
    out, m = rejection_mask(old, rollout, empty, mode="turn", lower=1.5, upper=2.0)
    assert not out.any()
    assert math.isnan(m["mismatch/rs_rejected_token_frac"]) and math.isnan(m["mismatch/rs_ratio_mean"])


def test_extreme_log_probs_are_clamped_and_finite():
    # log rho = 1000 and -1000 are clamped to +-20 before exp: e^20 = 4.85e8, finite.
    old = torch.tensor([[0.0, -1000.0], [1000.0, 0.0]], dtype=torch.float64)
    rollout = torch.tensor([[-1000.0, 0.0], [0.0, -1000.0]], dtype=torch.float64)
    mask = torch.ones(2, 2, dtype=torch.bool)
    for mode in RS_MODES:
        new_mask, m = rejection_mask(old, rollout, mask, [0, 1], mode=mode, lower=1e-3, upper=1e3)
        assert all(math.isfinite(v) for v in m.values()), (mode, m)
    _, m = rejection_mask(old, rollout, mask, mode="token", lower=1e-3, upper=1e3)
    assert m["mismatch/rs_ratio_max"] == pytest.approx(math.exp(20.0))
    assert m["mismatch/rs_ratio_min"] == pytest.approx(math.exp(-20.0))


def test_bad_arguments():
    old, rollout, mask = _rows([[0.0]])
    with pytest.raises(ValueError, match="known: token"):
        rejection_mask(old, rollout, mask, mode="nope")
    with pytest.raises(ValueError):
        rejection_mask(old, rollout, mask, mode="turn", lower=2.0, upper=1.0)
    with pytest.raises(ValueError):
        rejection_mask(old, rollout, mask[:, :2], mode="turn")
    with pytest.raises(ValueError):
        rejection_mask(old, rollout, mask, [0, 1], mode="geometric")


def test_token_veto_rejects_the_turn_only():
    # ln(1e-4) = -9.2103. Row 0: -10 < -9.21 -> vetoed. Row 1 (same trajectory): -9.0 is above
    # the threshold -> kept. Row 2: -50 sits on a padding position -> ignored, kept.
    old, rollout, mask = _rows([[0.0, -10.0], [-9.0, 0.5], [0.0]])
    old[2, 3] = -50.0
    new_mask, m = token_veto_mask(old, rollout, mask, ["t", "t", "u"], threshold=1e-4)
    assert not new_mask[0].any()
    assert new_mask[1:].equal(mask[1:])
    # 2 of 5 valid tokens, 1 of 3 turns, 0 of 2 trajectories rejected.
    assert m["mismatch/veto_rejected_token_frac"] == pytest.approx(2 / 5)
    assert m["mismatch/veto_rejected_turn_frac"] == pytest.approx(1 / 3)
    assert m["mismatch/veto_rejected_traj_frac"] == 0.0
    with pytest.raises(ValueError):
        token_veto_mask(old, rollout, mask, threshold=0.0)


def _loop_rejection(old, rollout, mask, traj_ids, mode, lower, upper):
    """Readable per-unit loop used as the oracle for the vectorised rejection_mask."""
    n, length = mask.shape
    lr = [[max(-20.0, min(20.0, float(old[i, t] - rollout[i, t]))) for t in range(length)] for i in range(n)]
    keep = [[True] * length for _ in range(n)]

    def ok(values, mean):
        if not values:
            return True
        s = sum(values) / len(values) if mean else sum(values)
        w = math.exp(max(-20.0, min(20.0, s)))
        return lower <= w <= upper

    for i in range(n):
        valid = [lr[i][t] for t in range(length) if mask[i, t]]
        if mode == "token":
            keep[i] = [not mask[i, t] or ok([lr[i][t]], False) for t in range(length)]
        elif mode in ("turn", "turn_geo"):
            keep[i] = [ok(valid, mode == "turn_geo")] * length
        else:
            rows = [j for j in range(n) if traj_ids[j] == traj_ids[i]]
            values = [lr[j][t] for j in rows for t in range(length) if mask[j, t]]
            keep[i] = [ok(values, mode == "geometric")] * length
    return mask & torch.tensor(keep)


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("mode", RS_MODES)
def test_vectorised_matches_loop(seed, mode):
    g = torch.Generator().manual_seed(seed)
    n, length = 9, 6
    rollout = -torch.rand(n, length, generator=g, dtype=torch.float64) * 3
    old = rollout + torch.randn(n, length, generator=g, dtype=torch.float64) * 0.05
    mask = torch.rand(n, length, generator=g) < 0.7
    mask[0] = False  # an empty row
    traj_ids = torch.randint(0, 4, (n,), generator=g).tolist()
    expected = _loop_rejection(old, rollout, mask, traj_ids, mode, 0.97, 1.03)
    got, _ = rejection_mask(old, rollout, mask, traj_ids, mode=mode, lower=0.97, upper=1.03)
    assert got.equal(expected)
