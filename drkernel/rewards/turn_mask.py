"""The multi-turn "meaningful turn" mask (Dr. Kernel's ``loss_mask``).

For trajectory i with turn rewards ``r_{i,1..T}``:

- the first existing turn is always trained;
- turn t >= 2 is not trained when some earlier turn had ``r > 0`` (a working kernel) and this
  turn's ``r <= 0`` (a regression): ``mask_{i,t} = NOT (exists k < t: r_{i,k} > 0 AND r_{i,t} <= 0)``;
- a trajectory that ended in an error or a timeout is masked entirely.

Once the policy has a working kernel, a later regression is neither rewarded nor penalised: it is
simply left out of the loss, of the TRLOO groups and (because its reward is then zeroed) of the
returns of earlier turns. "Success" is ``r > 0``, so with the tiered reward a correct but slow
kernel (-0.1) is not a success. Only existing turns count as "earlier".
"""

from __future__ import annotations

import torch

__all__ = ["meaningful_turn_mask"]


def meaningful_turn_mask(
    turn_rewards: torch.Tensor,
    turn_exists: torch.Tensor | None = None,
    failed: torch.Tensor | None = None,
) -> tuple[torch.Tensor, dict[str, float]]:
    """Which turns are trained: drop post-success regressions and failed trajectories.

    Args:
        turn_rewards: (N, T) reward of turn t of trajectory i (any value where the turn is absent).
        turn_exists: (N, T) bool, True where the turn exists (variable turn counts, front or back
            padding); None = all exist.
        failed: (N,) bool, True for a trajectory that ended in an error or timeout; None = none.

    Returns:
        ``(mask, metrics)``: (N, T) bool, True where the turn exists and is trained, and
        ``turn_mask/trained_frac`` (trained / existing turns), ``turn_mask/regression_frac``
        (existing turns masked as post-success regressions), ``turn_mask/failed_traj_frac``.

    Examples:
        rewards ``[0, 1.2, 0, 0.8]`` give ``[1, 1, 0, 1]``; ``[0, 0, 0]`` give ``[1, 1, 1]``.
    """
    if turn_rewards.dim() != 2:
        raise ValueError(f"turn_rewards must be (N, T), got shape {tuple(turn_rewards.shape)}")
    n, _ = turn_rewards.shape
    exists = torch.ones_like(turn_rewards, dtype=torch.bool) if turn_exists is None else turn_exists.bool()
    if exists.shape != turn_rewards.shape:
        raise ValueError(f"turn_exists must be {tuple(turn_rewards.shape)}, got {tuple(exists.shape)}")
    success = exists & (turn_rewards > 0)
    # prior_success_{i,t} = exists k < t: success_{i,k}  (inclusive cummax shifted right by one)
    seen = torch.cummax(success.to(torch.uint8), dim=1).values.bool()
    prior = torch.zeros_like(seen)
    prior[:, 1:] = seen[:, :-1]
    regression = exists & prior & (turn_rewards <= 0)
    mask = exists & ~regression
    if failed is not None:
        failed_b = torch.as_tensor(failed, device=turn_rewards.device).bool().reshape(-1)
        if failed_b.numel() != n:
            raise ValueError(f"failed must have length N={n}, got {failed_b.numel()}")
        mask = mask & ~failed_b[:, None]
    else:
        failed_b = torch.zeros(n, dtype=torch.bool, device=turn_rewards.device)

    n_exist = int(exists.sum())
    metrics = {
        "turn_mask/trained_frac": float(mask.sum()) / n_exist if n_exist else float("nan"),
        "turn_mask/regression_frac": float(regression.sum()) / n_exist if n_exist else float("nan"),
        "turn_mask/failed_traj_frac": float(failed_b.double().mean()) if n else float("nan"),
    }
    return mask, metrics
