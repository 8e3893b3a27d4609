"""Per-turn rewards -> per-turn discounted returns (reward-to-go across turns)."""

from __future__ import annotations

import torch


def discounted_returns(
    turn_rewards: torch.Tensor,
    turn_mask: torch.Tensor | None = None,
    gamma: float = 1.0,
) -> torch.Tensor:
    """Reward-to-go over turns: G_{i,t} = sum_{k >= t, mask[i,k]} gamma^(k-t) r_{i,k}.

    Computed backwards as G_{i,T-1} = r_{i,T-1}, G_{i,t} = r_{i,t} + gamma * G_{i,t+1}, with the
    reward of a masked turn counted as 0 (Dr. Kernel's training code zeroes the rewards of
    ``loss_mask=0`` rows before computing the returns). A masked cell's own G is not
    meaningful; the estimators set its advantage to 0.

    Args:
        turn_rewards: float ``(N, T)``, reward r_{i,t} of turn t of trajectory i.
        turn_mask: bool ``(N, T)`` or None (all turns valid).
        gamma: discount across turns, in [0, 1].

    Returns:
        G: ``(N, T)``, same dtype and device as ``turn_rewards``.

    Example (gamma = 0.5): r = [1, 2, 4] gives G = [1 + 0.5*2 + 0.25*4, 2 + 0.5*4, 4] = [3, 4, 4].
    """
    if turn_rewards.dim() != 2:
        raise ValueError(f"turn_rewards must be 2-D (N, T), got shape {tuple(turn_rewards.shape)}")
    if not turn_rewards.dtype.is_floating_point:
        turn_rewards = turn_rewards.to(torch.get_default_dtype())
    rewards = turn_rewards
    if turn_mask is not None:
        rewards = torch.where(turn_mask, turn_rewards, torch.zeros((), dtype=turn_rewards.dtype))
    returns = torch.empty_like(rewards)
    running = torch.zeros_like(rewards[:, 0]) if rewards.shape[1] else None
    for t in range(rewards.shape[1] - 1, -1, -1):  # loop over turns (T is small), not rows
        running = rewards[:, t] + gamma * running  # G_t = r_t + gamma * G_{t+1}
        returns[:, t] = running
    return returns
