"""Hierarchical reward decomposition: separate credit for a turn's reasoning and its code.

After TritonRL (Woo et al., arXiv 2510.17891), "Hierarchical Reward Decomposition" (HRD): a
turn's response has a high-level part (plan / reasoning text) and a low-level part (the code
block). Giving every token one blended reward blurs credit assignment over long responses, so
HRD reinforces the two parts with separate signals. Here each signal goes through the same
per-turn estimator (TRLOO by default) over the same groups:

    A^code_{i,t} = estimator(r^code)_{i,t},    A^plan_{i,t} = estimator(r^plan)_{i,t}
    A_{i,l} = A^code_{i,turn(l)}  if token l is in the code span
            = A^plan_{i,turn(l)}  otherwise (reasoning tokens of the turn)

and 0 on untrained tokens. Which reward feeds which span is the caller's choice; a typical
split is r^code = correctness + speedup terms and r^plan = a validity / format / plan-quality
reward. This is an option next to the Dr. Kernel recipe, which uses one reward per turn.
"""

from __future__ import annotations

import torch

from drkernel.advantages.registry import GroupIds, get_advantage
from drkernel.advantages.token_level import (
    _check_token_inputs,
    turn_mask_from_tokens,
    turn_to_token,
)

__all__ = ["hierarchical_token_advantages"]


def hierarchical_token_advantages(
    turn_rewards_code: torch.Tensor,
    turn_rewards_plan: torch.Tensor,
    group_ids: GroupIds,
    tok_turn_index: torch.Tensor,
    tok_code_mask: torch.Tensor,
    tok_mask: torch.Tensor,
    turn_mask: torch.Tensor | None = None,
    gamma: float = 1.0,
    estimator: str = "trloo",
    **knobs: object,
) -> torch.Tensor:
    """Token advantages with code tokens credited by the code reward, the rest by the plan reward.

    Args:
        turn_rewards_code: float ``(N, T)``, r^code_{i,t} (e.g. correctness + speedup).
        turn_rewards_plan: float ``(N, T)``, r^plan_{i,t} (e.g. validity / format reward).
        group_ids: length-N ids (ints or strings) or 1-D int tensor.
        tok_turn_index: int ``(N, L)``, 0-based turn of each token, -1 outside trained turns.
        tok_code_mask: bool ``(N, L)``, True on tokens of the code span.
        tok_mask: bool ``(N, L)``, trained tokens.
        turn_mask: bool ``(N, T)``; default: a turn is valid iff it has a trained token.
        gamma: discount across turns (applied to both signals).
        estimator: registered estimator name, e.g. "trloo".
        **knobs: extra keyword arguments for the estimator.

    Returns:
        tok_advantages: ``(N, L)``; A^code on trained code tokens, A^plan on the other trained
        tokens of a turn, 0 elsewhere.

    Example: one turn, two trajectories in one group, r^code = [1, 0], r^plan = [0, 1]. TRLOO
    gives A^code = [1, -1], A^plan = [-1, 1]: trajectory 0's code tokens get +1 and its
    reasoning tokens -1 (and the reverse for trajectory 1).
    """
    if turn_rewards_code.shape != turn_rewards_plan.shape or turn_rewards_code.dim() != 2:
        raise ValueError(
            f"turn_rewards_code {tuple(turn_rewards_code.shape)} and turn_rewards_plan "
            f"{tuple(turn_rewards_plan.shape)} must share one (N, T) shape"
        )
    n, num_turns = turn_rewards_code.shape
    if tok_code_mask.shape != tok_mask.shape or tok_code_mask.dtype != torch.bool:
        raise ValueError(
            f"tok_code_mask must be bool with tok_mask's shape {tuple(tok_mask.shape)}, got "
            f"{tuple(tok_code_mask.shape)} {tok_code_mask.dtype}"
        )
    _check_token_inputs(tok_turn_index, tok_mask, tok_mask.shape, num_turns)
    if tok_mask.shape[0] != n:
        raise ValueError(f"token tensors have {tok_mask.shape[0]} rows but turn rewards have N={n}")

    if turn_mask is None:
        turn_mask = turn_mask_from_tokens(tok_turn_index, tok_mask, num_turns)

    fn = get_advantage(estimator)
    adv_code = fn(turn_rewards_code, group_ids, turn_mask, gamma, **knobs)  # A^code_{i,t}
    adv_plan = fn(turn_rewards_plan, group_ids, turn_mask, gamma, **knobs)  # A^plan_{i,t}
    tok_adv_code = turn_to_token(adv_code, tok_turn_index, tok_mask & tok_code_mask)
    tok_adv_plan = turn_to_token(adv_plan, tok_turn_index, tok_mask & ~tok_code_mask)
    return tok_adv_code + tok_adv_plan  # disjoint spans: code tokens <- A^code, others <- A^plan
