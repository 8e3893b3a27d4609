"""verl's token layout <-> the Dr. Kernel step's tensors (pure torch; no verl import).

verl keeps one row per trajectory: ``responses`` holds every turn's model tokens and the
environment's feedback tokens between them, ``response_mask`` is 1 on model tokens. drkernel adds
one per-token tensor, ``tok_turn_index`` (0-based turn of each model token, -1 on feedback and
padding), and writes each turn's reward onto the last model token of that turn in ``rm_scores``.
From those two the per-turn rewards ``(N, T)`` follow without any other field.

When ``tok_turn_index`` is missing (a batch produced by another agent loop), turns are recovered as
the maximal runs of 1 in ``response_mask``: each turn's tokens are contiguous and separated by
feedback tokens (mask 0), which is what every multi-turn loop in verl produces.
"""

from __future__ import annotations

import torch

__all__ = ["turn_index_from_mask", "turn_rewards_from_tokens", "turn_values_to_tokens", "last_token_of_turns"]


def turn_index_from_mask(response_mask: torch.Tensor) -> torch.Tensor:
    """``(N, L)`` int64: the 0-based turn of each masked token, counting runs of 1s; -1 elsewhere.

    Example: mask ``[1, 1, 0, 0, 1, 0, 1]`` gives ``[0, 0, -1, -1, 1, -1, 2]``.
    """
    mask = response_mask.bool()
    prev = torch.zeros_like(mask)
    prev[:, 1:] = mask[:, :-1]
    starts = mask & ~prev  # first token of each run
    run = torch.cumsum(starts.long(), dim=1) - 1  # run number of each token
    return torch.where(mask, run, torch.full_like(run, -1))


def turn_rewards_from_tokens(
    tok_rewards: torch.Tensor, tok_turn_index: torch.Tensor, num_turns: int | None = None
) -> torch.Tensor:
    """``(N, T)``: r_{i,t} = sum of ``tok_rewards[i, l]`` over tokens of turn t.

    Raises:
        ValueError: a non-zero reward on a token outside every turn (it would be lost).
    """
    ti = tok_turn_index.long()
    if bool(((ti < 0) & (tok_rewards != 0)).any()):
        raise ValueError("a non-zero token reward sits on a token with no turn (tok_turn_index -1)")
    n = ti.shape[0]
    t = int(ti.max()) + 1 if ti.numel() and num_turns is None else int(num_turns or 0)
    t = max(t, 0)
    out = torch.zeros(n * max(t, 1), dtype=tok_rewards.dtype if tok_rewards.is_floating_point() else torch.float32,
                      device=tok_rewards.device)
    inside = ti >= 0
    rows = torch.arange(n, device=ti.device)[:, None].expand_as(ti)
    out.index_add_(0, (rows * max(t, 1) + ti.clamp(min=0))[inside], tok_rewards[inside].to(out.dtype))
    return out.view(n, max(t, 1))[:, :t]


def turn_values_to_tokens(turn_values: torch.Tensor, tok_turn_index: torch.Tensor) -> torch.Tensor:
    """``(N, L)``: ``turn_values[i, turn(l)]`` on turn tokens, 0 on tokens with turn index -1."""
    ti = tok_turn_index.long()
    if turn_values.shape[1] == 0:
        return torch.zeros(ti.shape, dtype=turn_values.dtype, device=turn_values.device)
    picked = turn_values.gather(1, ti.clamp(min=0, max=turn_values.shape[1] - 1))
    return torch.where(ti >= 0, picked, torch.zeros((), dtype=picked.dtype, device=picked.device))


def last_token_of_turns(tok_turn_index: torch.Tensor, num_turns: int) -> torch.Tensor:
    """``(N, T)`` int64: position of the last token of turn t in row i, -1 if the turn has none."""
    ti = tok_turn_index.long()
    n, length = ti.shape
    pos = torch.arange(length, device=ti.device).expand(n, length)
    out = torch.full((n, num_turns), -1, dtype=torch.long, device=ti.device)
    for t in range(num_turns):
        out[:, t] = torch.where(ti == t, pos, torch.full_like(pos, -1)).max(dim=1).values
    return out
