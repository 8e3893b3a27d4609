"""Tests for drkernel/step/layout.py: the reference's turn rows <-> the step's trajectory rows."""

import pytest
import torch

from drkernel.advantages.token_level import row_level_advantages
from drkernel.step import DrKernelStepConfig, StepBatch, TurnRowPacking, dr_kernel_step


def test_small_example_by_hand():
    # rows: (a, 1), (a, 2), (b, 1); L = 2 -> packed (2, 4); cell (b, 2) empty
    p = TurnRowPacking.build(["a", "a", "b"], torch.tensor([1, 2, 1]), length=2)
    assert (p.num_traj, p.num_turns) == (2, 2) and p.cell.tolist() == [0, 1, 2]
    x = torch.tensor([[1, 2], [3, 4], [5, 6]])
    assert p.pack_tokens(x).tolist() == [[1, 2, 3, 4], [5, 6, 0, 0]]
    mask = torch.tensor([[1, 1], [1, 0], [1, 0]]).bool()
    assert p.tok_turn_index(mask).tolist() == [[0, 0, 1, -1], [0, -1, -1, -1]]
    assert p.pack_turns(torch.tensor([0.5, 1.5, 2.5])).tolist() == [[0.5, 1.5], [2.5, 0.0]]
    assert torch.equal(p.unpack_tokens(p.pack_tokens(x)), x)
    # only trajectory b kept: a's rows come back 0
    assert p.unpack_tokens(p.pack_tokens(x)[1:], torch.tensor([1])).tolist() == [[0, 0], [0, 0], [5, 6]]
    assert p.traj_values(["u", "u", "v"]) == ["u", "v"]
    with pytest.raises(ValueError, match="disagree"):
        p.traj_values(["u", "w", "v"])
    with pytest.raises(ValueError, match="same"):
        TurnRowPacking.build(["a", "a"], torch.tensor([1, 1]), length=2)


def test_reference_rows_through_the_step_match_the_row_level_adapter():
    # Reference layout: T = 3 rows per trajectory, front padding (-1) for E, which has 2 turns.
    # Trajectories A-D are the trloo docstring's example (D's turn 2 a regression),
    # E = [0.5, 0.9]. Every real turn row has 3 response tokens, the padding row none.
    turn_rewards = {"A": [0, 1.0, 1.5], "B": [0, 0, 0], "C": [1.0, 1.2, 1.6], "D": [1.1, 0, 1.3], "E": [0.5, 0.9]}
    traj, turn, reward = [], [], []
    for name, rs in turn_rewards.items():
        pad = 3 - len(rs)
        traj += [name] * 3
        turn += [-1] * pad + list(range(1, len(rs) + 1))
        reward += [0.0] * pad + rs
    r_rows, length = len(traj), 3
    turn_t = torch.tensor(turn)
    response_mask = (turn_t >= 1)[:, None].expand(r_rows, length).clone()
    p = TurnRowPacking.build(traj, turn_t, length=length)
    mask = p.pack_tokens(response_mask, False)
    rewards = p.pack_turns(torch.tensor(reward, dtype=torch.float64))
    batch = StepBatch(
        response_mask=mask,
        old_log_probs=torch.zeros(mask.shape, dtype=torch.float64),
        tok_turn_index=p.tok_turn_index(response_mask),
        turn_rewards=rewards,
        group_ids=p.traj_values(["g"] * r_rows),
        rollout_log_probs=torch.zeros(mask.shape, dtype=torch.float64),
        turn_correct=rewards > 0,
        turn_coverage=torch.ones_like(rewards),
    )
    res, _ = dr_kernel_step(batch, DrKernelStepConfig(target_num_groups=1, samples_per_prompt=5))
    tok_adv = p.unpack_tokens(res.tok_advantages, res.kept_rows)  # (R, L)
    loss_mask = p.unpack_tokens(res.loss_mask, res.kept_rows)
    # Independent path: the existing row-level adapter with the meaningful-turn loss mask
    loss_rows = torch.ones(r_rows, dtype=torch.bool)
    loss_rows[traj.index("D") + 1] = False  # D's turn 2
    expected = row_level_advantages(torch.tensor(reward, dtype=torch.float64), traj, turn_t, loss_rows, ["g"] * r_rows)
    assert torch.allclose(tok_adv, expected[:, None] * loss_mask)
    assert loss_mask.any(dim=1).tolist() == [bool(x) for x in (turn_t >= 1) & loss_rows]
    # E has turns 1, 2 at absolute positions 1, 2 (front padding dropped): it joins turn 1 and 2 groups
    e_turn1 = traj.index("E") + 1
    assert tok_adv[e_turn1, 0].item() == pytest.approx(expected[e_turn1].item())
