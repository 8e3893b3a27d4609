"""Tests for drkernel/advantages/hierarchical.py."""

from __future__ import annotations

import pytest
import torch

from drkernel.advantages.hierarchical import hierarchical_token_advantages
from drkernel.advantages.token_level import token_level_advantages


def layout() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Two trajectories, one turn each, L = 7: prompt, 3 reasoning tokens, 2 code tokens, pad.

    position: 0      1 2 3      4 5   6
    role:     prompt reasoning  code  pad
    """
    tok_turn_index = torch.tensor([[-1, 0, 0, 0, 0, 0, -1]] * 2)
    tok_code_mask = torch.tensor([[False, False, False, False, True, True, False]] * 2)
    tok_mask = tok_turn_index >= 0
    return tok_turn_index, tok_code_mask, tok_mask


def test_docstring_example() -> None:
    # One group, one turn: r_code = [1, 0], r_plan = [0, 1].
    # TRLOO with |S| = 2: A_code = [1 - 0, 0 - 1] = [1, -1]; A_plan = [0 - 1, 1 - 0] = [-1, 1].
    # Trajectory 0: reasoning tokens (1..3) get A_plan = -1, code tokens (4, 5) get A_code = +1.
    tok_turn_index, tok_code_mask, tok_mask = layout()
    adv = hierarchical_token_advantages(
        torch.tensor([[1.0], [0.0]]),
        torch.tensor([[0.0], [1.0]]),
        ["p", "p"],
        tok_turn_index,
        tok_code_mask,
        tok_mask,
    )
    expected = torch.tensor([[0, -1, -1, -1, 1, 1, 0], [0, 1, 1, 1, -1, -1, 0]], dtype=torch.float32)
    torch.testing.assert_close(adv, expected)


def test_untrained_code_tokens_stay_zero() -> None:
    tok_turn_index, tok_code_mask, tok_mask = layout()
    tok_mask[0, 5] = False  # one code token rejected
    adv = hierarchical_token_advantages(
        torch.tensor([[1.0], [0.0]]), torch.tensor([[0.0], [1.0]]), [0, 0], tok_turn_index, tok_code_mask, tok_mask
    )
    assert adv[0, 5].item() == 0.0 and adv[0, 4].item() == 1.0


def test_equal_signals_reduce_to_token_level_adapter() -> None:
    # With r_code == r_plan, every trained token gets the same A as the plain token adapter.
    gen = torch.Generator().manual_seed(0)
    n, length = 6, 12
    tok_turn_index = torch.tensor([[-1, 0, 0, 0, -1, 1, 1, 1, -1, 2, 2, -1]] * n)
    tok_mask = (tok_turn_index >= 0) & (torch.rand(n, length, generator=gen) < 0.9)
    tok_code_mask = torch.rand(n, length, generator=gen) < 0.5
    turn_rewards = torch.rand(n, 3, generator=gen, dtype=torch.float64)
    tok_rewards = torch.zeros(n, length, dtype=torch.float64)
    tok_rewards[:, [3, 7, 10]] = turn_rewards  # each turn's reward on its last token
    groups = [0, 0, 0, 1, 1, 1]
    for estimator in ("trloo", "grpo", "rloo"):
        adv = hierarchical_token_advantages(
            turn_rewards, turn_rewards, groups, tok_turn_index, tok_code_mask, tok_mask,
            gamma=0.9, estimator=estimator,
        )
        plain = token_level_advantages(tok_rewards, tok_turn_index, tok_mask, groups, 0.9, estimator, max_turns=3)
        torch.testing.assert_close(adv, plain)


def test_shape_validation() -> None:
    tok_turn_index, tok_code_mask, tok_mask = layout()
    with pytest.raises(ValueError, match="share one"):
        hierarchical_token_advantages(
            torch.zeros(2, 1), torch.zeros(2, 2), [0, 0], tok_turn_index, tok_code_mask, tok_mask
        )
    with pytest.raises(ValueError, match="tok_code_mask"):
        hierarchical_token_advantages(
            torch.zeros(2, 1), torch.zeros(2, 1), [0, 0], tok_turn_index, tok_code_mask.long(), tok_mask
        )
