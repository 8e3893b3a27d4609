"""Tests for drkernel/advantages/token_level.py."""

from __future__ import annotations

import pytest
import torch

from drkernel.advantages.grpo import grpo_advantages
from drkernel.advantages.token_level import (
    row_level_advantages,
    token_level_advantages,
    token_to_turn_rewards,
    turn_to_token,
)


def token_example() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Three trajectories of one prompt, two turns in one row of L = 10 tokens.

    position:  0 1 | 2 3 4   | 5 6      | 7 8     | 9
    role:      prompt | turn 0 | feedback | turn 1 | pad
    Rewards sit on each turn's last token (4 and 8).
    a: r = [0, 1];  token 2 is masked out (e.g. a rejected token) but turn 0 stays valid.
    b: r = [1, 2].
    c: r = [0.5, 5]; all of turn 1's tokens are masked, so turn 1 is invalid and its 5 is dropped.
    """
    turn_row = [-1, -1, 0, 0, 0, -1, -1, 1, 1, -1]
    tok_turn_index = torch.tensor([turn_row] * 3)
    tok_rewards = torch.zeros(3, 10)
    tok_rewards[:, 4] = torch.tensor([0.0, 1.0, 0.5])
    tok_rewards[:, 8] = torch.tensor([1.0, 2.0, 5.0])
    tok_mask = tok_turn_index >= 0
    tok_mask[0, 2] = False
    tok_mask[2, 7:9] = False
    return tok_rewards, tok_turn_index, tok_mask


def test_token_to_turn_rewards() -> None:
    tok_rewards, tok_turn_index, tok_mask = token_example()
    turn_rewards, turn_mask = token_to_turn_rewards(tok_rewards, tok_turn_index, tok_mask)
    torch.testing.assert_close(turn_rewards, torch.tensor([[0.0, 1.0], [1.0, 2.0], [0.5, 5.0]]))
    assert turn_mask.tolist() == [[True, True], [True, True], [True, False]]


def test_token_level_trloo_hand_example() -> None:
    tok_rewards, tok_turn_index, tok_mask = token_example()
    adv = token_level_advantages(tok_rewards, tok_turn_index, tok_mask, ["p"] * 3)
    # Returns (gamma = 1): G_a = [1, 1], G_b = [3, 2], G_c = [0.5, masked].
    # Turn 0: S = {a, b, c}, sum 4.5: A_a = 1 - 3.5/2 = -0.75, A_b = 3 - 1.5/2 = 2.25,
    #         A_c = 0.5 - 4/2 = -1.5.
    # Turn 1: S = {a, b}: A_a = 1 - 2 = -1, A_b = 2 - 1 = 1; c's turn 1 is masked -> 0.
    # Tokens get their turn's A where tok_mask is True (a's token 2 is masked -> 0).
    expected = torch.tensor(
        [
            [0, 0, 0.0, -0.75, -0.75, 0, 0, -1.0, -1.0, 0],
            [0, 0, 2.25, 2.25, 2.25, 0, 0, 1.0, 1.0, 0],
            [0, 0, -1.5, -1.5, -1.5, 0, 0, 0.0, 0.0, 0],
        ]
    )
    torch.testing.assert_close(adv, expected)


def test_turn_mask_override_keeps_rejected_turn_in_baseline() -> None:
    # Dr. Kernel keeps MRS/PRS-rejected turns in their peers' baselines (it groups by loss_mask):
    # pass the pre-rejection turn mask. Now c's turn 1 (r = 5) counts: G_c = [5.5, 5].
    # Turn 0: G = {1, 3, 5.5}, sum 9.5: A_a = 1 - 8.5/2 = -3.25, A_b = 3 - 6.5/2 = -0.25,
    #         A_c = 5.5 - 4/2 = 3.5.
    # Turn 1: G = {1, 2, 5}, sum 8: A_a = 1 - 7/2 = -2.5, A_b = 2 - 6/2 = -1, A_c = 3.5 but c's
    #         turn-1 tokens are masked, so they still get 0.
    tok_rewards, tok_turn_index, tok_mask = token_example()
    turn_mask = torch.ones(3, 2, dtype=torch.bool)
    adv = token_level_advantages(tok_rewards, tok_turn_index, tok_mask, ["p"] * 3, turn_mask=turn_mask)
    assert adv[0, 3:5].tolist() == [-3.25, -3.25]
    assert adv[1, 2:5].tolist() == [-0.25] * 3
    assert adv[2, 2:5].tolist() == [3.5] * 3
    assert adv[0, 7:9].tolist() == [-2.5, -2.5]
    assert adv[1, 7:9].tolist() == [-1.0, -1.0]
    assert adv[2, 7:9].tolist() == [0.0, 0.0]


def test_token_level_passes_knobs_and_max_turns() -> None:
    tok_rewards, tok_turn_index, tok_mask = token_example()
    adv = token_level_advantages(
        tok_rewards, tok_turn_index, tok_mask, [0, 0, 0], estimator="grpo", max_turns=3, norm_by_std=True
    )
    turn_rewards, turn_mask = token_to_turn_rewards(tok_rewards, tok_turn_index, tok_mask, max_turns=3)
    assert turn_mask.shape == (3, 3) and not turn_mask[:, 2].any()  # unused third turn
    expected_turn = grpo_advantages(turn_rewards, [0, 0, 0], turn_mask, norm_by_std=True)
    torch.testing.assert_close(adv, turn_to_token(expected_turn, tok_turn_index, tok_mask))


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ("reward_on_prompt", "non-zero"),
        ("bad_index", "-1"),
        ("float_mask", "bool"),
        ("small_max_turns", "max_turns"),
    ],
)
def test_token_level_validation(change: str, message: str) -> None:
    tok_rewards, tok_turn_index, tok_mask = token_example()
    max_turns = None
    if change == "reward_on_prompt":
        tok_rewards[0, 0] = 1.0
    elif change == "bad_index":
        tok_turn_index[0, 0] = -2
    elif change == "float_mask":
        tok_mask = tok_mask.float()
    else:
        max_turns = 1
    with pytest.raises(ValueError, match=message):
        token_level_advantages(tok_rewards, tok_turn_index, tok_mask, ["p"] * 3, max_turns=max_turns)


def row_example() -> dict[str, object]:
    """Dr. Kernel's layout: one row per (trajectory, turn), max_turns = 3, front padding.

    X (prompt p): 3 turns, r = [0, 1, 1], loss_mask [1, 1, 1].
    Y (prompt p): 2 turns, so one padding row first (turn -1); r = [1, -0.3], loss_mask [1, 0]
       (turn 2 failed after a success: not a meaningful turn).
    Z (prompt p): 3 turns, r = [0, 0, 0.5].
    W (prompt q): 3 turns, r = [2, 2, 2], the only trajectory of its prompt.
    """
    return {
        "row_rewards": torch.tensor([0.0, 1.0, 1.0, 0.0, 1.0, -0.3, 0.0, 0.0, 0.5, 2.0, 2.0, 2.0]),
        "row_traj_ids": ["X"] * 3 + ["Y"] * 3 + ["Z"] * 3 + ["W"] * 3,
        "row_turn_index": torch.tensor([1, 2, 3, -1, 1, 2, 1, 2, 3, 1, 2, 3]),
        "row_loss_mask": torch.tensor([1, 1, 1, 0, 1, 0, 1, 1, 1, 1, 1, 1]),
        "row_group_ids": ["p"] * 9 + ["q"] * 3,
    }


# Returns: G_X = [2, 2, 1]; G_Y = [1, -, -] (its -0.3 is masked out); G_Z = [0.5, 0.5, 0.5];
# G_W = [6, 4, 2].
# Turn 1: S = {X, Y, Z}, sum 3.5: A_X = 2 - 1.5/2 = 1.25, A_Y = 1 - 2.5/2 = -0.25, A_Z = 0.5 - 3/2 = -1.
# Turn 2: S = {X, Z}: A_X = 2 - 0.5 = 1.5, A_Z = -1.5; Y's turn 2 is masked -> 0.
# Turn 3: S = {X, Z}: A_X = 1 - 0.5 = 0.5, A_Z = -0.5 (Y has no turn 3).
# W is alone in every cell: A = G = [6, 4, 2]. Padding rows get 0.
ROW_EXPECTED = [1.25, 1.5, 0.5, 0.0, -0.25, 0.0, -1.0, -1.5, -0.5, 6.0, 4.0, 2.0]


def test_row_level_front_padding_example() -> None:
    adv = row_level_advantages(**row_example())
    torch.testing.assert_close(adv, torch.tensor(ROW_EXPECTED))


def test_row_level_row_order_and_bool_mask() -> None:
    example = row_example()
    perm = torch.randperm(12, generator=torch.Generator().manual_seed(0))
    shuffled = {
        "row_rewards": example["row_rewards"][perm],
        "row_traj_ids": [example["row_traj_ids"][i] for i in perm.tolist()],
        "row_turn_index": example["row_turn_index"][perm],
        "row_loss_mask": example["row_loss_mask"][perm].bool(),
        "row_group_ids": [example["row_group_ids"][i] for i in perm.tolist()],
    }
    torch.testing.assert_close(row_level_advantages(**shuffled), torch.tensor(ROW_EXPECTED)[perm])


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ("turn_zero", "1-based"),
        ("duplicate", "same"),
        ("two_groups", "different group"),
        ("mask_two", "0/1"),
        ("max_turns", "max_turns"),
    ],
)
def test_row_level_validation(change: str, message: str) -> None:
    example = row_example()
    kwargs: dict[str, object] = {}
    if change == "turn_zero":
        example["row_turn_index"][0] = 0
    elif change == "duplicate":
        example["row_turn_index"][1] = 1
    elif change == "two_groups":
        example["row_group_ids"][1] = "q"
    elif change == "mask_two":
        example["row_loss_mask"][0] = 2
    else:
        kwargs["max_turns"] = 2
    with pytest.raises(ValueError, match=message):
        row_level_advantages(**example, **kwargs)
