"""Tests for drkernel/rewards/turn_mask.py (the meaningful-turn mask)."""

import pytest
import torch

from drkernel.rewards.turn_mask import meaningful_turn_mask


def test_reference_examples():
    # [0, 1.2, 0, 0.8]: turn 3 follows a success (1.2) and has r <= 0 -> masked; turn 4 (0.8 > 0)
    # is trained. [0, 0, 0]: no success ever -> everything trained.
    rewards = torch.tensor([[0.0, 1.2, 0.0, 0.8], [0.0, 0.0, 0.0, float("nan")]])
    exists = torch.tensor([[1, 1, 1, 1], [1, 1, 1, 0]], dtype=torch.bool)
    mask, m = meaningful_turn_mask(rewards, exists)
    assert mask.int().tolist() == [[1, 1, 0, 1], [1, 1, 1, 0]]
    # 6 of 7 existing turns trained; 1 regression
    assert m["turn_mask/trained_frac"] == pytest.approx(6 / 7)
    assert m["turn_mask/regression_frac"] == pytest.approx(1 / 7)


def test_first_turn_always_trained_and_negative_rewards():
    # Turn 1 has r <= 0 but no earlier success: trained. After a success (0.5), a negative reward
    # (-0.3) and a zero are both masked; 0.2 > 0 is trained.
    rewards = torch.tensor([[-0.5, 0.5, -0.3, 0.0, 0.2]])
    mask, _ = meaningful_turn_mask(rewards)
    assert mask.int().tolist() == [[1, 1, 0, 0, 1]]


def test_front_padding_and_failed_trajectories():
    # Front-padded like the reference: row 0 has real turns at t = 1, 2 only. The padding's
    # reward (5.0) must not count as an earlier success, so real turn 1 (r = 0) is trained.
    # Row 1 ended in an error: fully masked.
    rewards = torch.tensor([[5.0, 0.0, 0.7], [1.0, 0.0, 1.0]])
    exists = torch.tensor([[0, 1, 1], [1, 1, 1]], dtype=torch.bool)
    mask, m = meaningful_turn_mask(rewards, exists, failed=torch.tensor([False, True]))
    assert mask.int().tolist() == [[0, 1, 1], [0, 0, 0]]
    assert m["turn_mask/failed_traj_frac"] == 0.5
    # 2 trained of 5 existing turns; row 1's turn 2 (0 after 1.0) is still counted a regression
    assert m["turn_mask/trained_frac"] == pytest.approx(2 / 5)
    assert m["turn_mask/regression_frac"] == pytest.approx(1 / 5)


def _loop(rewards, exists):
    out = []
    for r_row, e_row in zip(rewards.tolist(), exists.tolist()):
        seen, row = False, []
        for r, e in zip(r_row, e_row):
            row.append(e and not (seen and r <= 0))
            seen = seen or (e and r > 0)
        out.append(row)
    return torch.tensor(out)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_vectorised_matches_loop(seed):
    g = torch.Generator().manual_seed(seed)
    rewards = torch.randint(-1, 3, (20, 5), generator=g).double() * 0.5
    exists = torch.rand(20, 5, generator=g) < 0.8
    mask, _ = meaningful_turn_mask(rewards, exists)
    assert mask.equal(_loop(rewards, exists))


def test_bad_shapes():
    with pytest.raises(ValueError):
        meaningful_turn_mask(torch.zeros(3))
    with pytest.raises(ValueError):
        meaningful_turn_mask(torch.zeros(2, 3), torch.ones(2, 2, dtype=torch.bool))
    with pytest.raises(ValueError):
        meaningful_turn_mask(torch.zeros(2, 3), failed=torch.tensor([True]))
