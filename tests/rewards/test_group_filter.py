"""Tests for drkernel/rewards/group_filter.py (low-variance group filter and selection)."""

import math

import pytest
import torch

from drkernel.rewards.group_filter import filter_groups, filter_groups_last_turn, last_turn_rewards


def test_low_variance_groups_dropped_singletons_kept():
    # a: [1, 1] std 0 -> dropped; b: [0, 2.5] std = 2.5/sqrt(2) = 1.77 -> kept;
    # c: [0.7] singleton, not checked -> kept; d: [0.5, 0.5005] std = 0.0005/sqrt(2) = 3.5e-4 < 1e-3
    #   -> dropped.
    rewards = torch.tensor([1.0, 1.0, 0.0, 2.5, 0.7, 0.5, 0.5005], dtype=torch.float64)
    sel, m = filter_groups(rewards, ["a", "a", "b", "b", "c", "d", "d"])
    assert sel.kept_groups == ["b", "c"]
    assert sel.row_mask.tolist() == [False, False, True, True, True, False, False]
    assert sel.enough
    assert m["filter/num_groups"] == 4 and m["filter/num_low_variance"] == 2
    assert m["filter/num_valid_groups"] == 2 and m["filter/valid_group_frac"] == 0.5
    # mean of the selected rewards [0, 2.5, 0.7] = 3.2/3
    assert m["filter/selected_reward_mean"] == pytest.approx(3.2 / 3)


def test_std_is_unbiased():
    # [0, 0.0014]: biased std 0.0007 (< 1e-3), unbiased 0.0014/sqrt(2) = 0.00099 (< 1e-3) -> dropped;
    # [0, 0.0015]: unbiased 0.00106 >= 1e-3 -> kept, though the biased std (0.00075) would drop it.
    rewards = torch.tensor([0.0, 0.0014, 0.0, 0.0015], dtype=torch.float64)
    sel, _ = filter_groups(rewards, [1, 1, 2, 2])
    assert sel.kept_groups == [2]


def test_row_mask_and_min_group_size():
    # group 0: rows [1.0, 0.0, <invalid 0.0>] -> 2 valid rows, std 0.71, kept if min size <= 2
    # group 1: rows [0.3, 0.9, 0.5] -> 3 valid rows, kept
    rewards = torch.tensor([1.0, 0.0, 0.0, 0.3, 0.9, 0.5])
    valid = torch.tensor([True, True, False, True, True, True])
    sel, m = filter_groups(rewards, torch.tensor([0, 0, 0, 1, 1, 1]), valid, min_group_size=3)
    assert sel.kept_groups == [1]
    assert m["filter/num_too_small"] == 1
    sel, _ = filter_groups(rewards, torch.tensor([0, 0, 0, 1, 1, 1]), valid)
    assert sel.row_mask.tolist() == [True, True, False, True, True, True]


def test_selection_prefers_complete_groups_and_is_seeded():
    # 5 groups with reward variance; g0, g2, g4 have 3 valid rows (complete), g1, g3 only 2.
    ids = [0, 0, 0, 1, 1, 2, 2, 2, 3, 3, 4, 4, 4]
    rewards = torch.tensor([0.0, 1.0, 2.0] * 1 + [0.0, 1.0] + [0.0, 1.0, 2.0] + [0.0, 1.0] + [0.0, 1.0, 2.0])
    # target 3 with group size 3: exactly the complete groups, whatever the seed
    for seed in range(3):
        sel, m = filter_groups(rewards, ids, target_num_groups=3, target_group_size=3,
                               generator=torch.Generator().manual_seed(seed))
        assert sel.kept_groups == [0, 2, 4] and sel.enough and m["filter/num_selected"] == 3
    # target 4: the three complete groups plus one of g1, g3
    sel, _ = filter_groups(rewards, ids, target_num_groups=4, target_group_size=3,
                           generator=torch.Generator().manual_seed(0))
    assert set(sel.kept_groups) >= {0, 2, 4} and len(sel.kept_groups) == 4
    # reproducible with a seed
    picks = [filter_groups(rewards, ids, target_num_groups=2, generator=torch.Generator().manual_seed(s))[0].kept_groups
             for s in (5, 5)]
    assert picks[0] == picks[1]
    # too few groups: keep all, report not enough (the trainer buffers)
    sel, m = filter_groups(rewards, ids, target_num_groups=6)
    assert len(sel.kept_groups) == 5 and not sel.enough and m["filter/enough_groups"] == 0.0
    with pytest.raises(ValueError, match="Generator"):
        filter_groups(rewards, ids, target_num_groups=2)


def test_last_turn_view():
    # Front-padded rows: the last existing turn is the last column with exists = True.
    # traj 0: [pad, 0.0, 1.0] -> 1.0; traj 1: [0.5, 1.0, pad 9.9] -> 1.0 (back padding works too);
    # traj 2: [0.2, 0.2, 0.0] -> 0.0; traj 3: no turn -> 0, has_turn False.
    turn_rewards = torch.tensor([[7.0, 0.0, 1.0], [0.5, 1.0, 9.9], [0.2, 0.2, 0.0], [1.0, 1.0, 1.0]])
    exists = torch.tensor([[0, 1, 1], [1, 1, 0], [1, 1, 1], [0, 0, 0]], dtype=torch.bool)
    r, has = last_turn_rewards(turn_rewards, exists)
    assert r.tolist() == [1.0, 1.0, 0.0, 0.0] and has.tolist() == [True, True, True, False]
    # groups: p = trajs 0, 1 (last-turn rewards 1.0, 1.0 -> no variance, dropped although their
    # earlier turns differ); q = trajs 2, 3 (only traj 2 valid -> singleton, kept)
    sel, m = filter_groups_last_turn(turn_rewards, ["p", "p", "q", "q"], exists)
    assert sel.kept_groups == ["q"] and sel.row_mask.tolist() == [False, False, True, False]


def test_empty_input():
    sel, m = filter_groups(torch.zeros(0), [])
    assert sel.kept_groups == [] and math.isnan(m["filter/valid_group_frac"])
