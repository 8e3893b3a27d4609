"""Adapters between token/row layouts and the per-turn ``(N, T)`` estimators.

Two layouts are supported, both fully vectorised:

1. **Token rows** (one row per trajectory, all turns in one token sequence; TRL/OpenRLHF style):
   :func:`token_level_advantages` sums each turn's token rewards into r_{i,t}, calls the
   estimator, and writes A_{i,t} back onto that turn's tokens.
2. **Turn rows** (one row per (trajectory, turn), as Dr. Kernel's verl code flattens rollouts,
   missing turns front-padded): :func:`row_level_advantages` gathers the rows into
   ``(N, T)``, calls the estimator and returns one advantage per row. Multiply by the row's
   ``response_mask`` to get token advantages.

Shapes: N trajectories, L tokens per row, T turns, R rows.
"""

from __future__ import annotations

import torch

from drkernel.advantages._groups import dense_group_ids
from drkernel.advantages.registry import GroupIds, get_advantage
from drkernel.turns import row_cells, tokens_to_turns, turn_exists, turns_to_tokens

__all__ = [
    "token_to_turn_rewards",
    "turn_mask_from_tokens",
    "turn_to_token",
    "token_level_advantages",
    "row_level_advantages",
]

_INT_DTYPES = (torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8)


def _check_token_inputs(
    tok_turn_index: torch.Tensor, tok_mask: torch.Tensor, shape: torch.Size, max_turns: int | None
) -> int:
    """Validate the token layout; return T."""
    if tok_turn_index.shape != shape or tok_mask.shape != shape:
        raise ValueError(
            f"tok_turn_index {tuple(tok_turn_index.shape)} and tok_mask {tuple(tok_mask.shape)} "
            f"must both have shape (N, L) = {tuple(shape)}"
        )
    if len(shape) != 2:
        raise ValueError(f"token tensors must be 2-D (N, L), got shape {tuple(shape)}")
    if tok_turn_index.dtype not in _INT_DTYPES:
        raise ValueError(f"tok_turn_index must be an integer tensor, got {tok_turn_index.dtype}")
    if tok_mask.dtype != torch.bool:
        raise ValueError(f"tok_mask must be a bool tensor, got {tok_mask.dtype}; use mask.bool()")
    if tok_turn_index.numel() and int(tok_turn_index.min()) < -1:
        raise ValueError("tok_turn_index must be -1 (no turn) or a 0-based turn index >= 0")
    seen = int(tok_turn_index.max()) + 1 if tok_turn_index.numel() else 0
    if max_turns is None:
        return max(seen, 0)
    if seen > max_turns:
        raise ValueError(f"tok_turn_index has turn {seen - 1} but max_turns={max_turns}")
    return int(max_turns)


def token_to_turn_rewards(
    tok_rewards: torch.Tensor,
    tok_turn_index: torch.Tensor,
    tok_mask: torch.Tensor,
    max_turns: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-token rewards -> per-turn rewards and turn mask.

    r_{i,t} = sum of ``tok_rewards[i, l]`` over tokens l with ``tok_turn_index[i, l] == t``
    (masked-out tokens of the turn included: the reward usually sits on the turn's last token);
    ``turn_mask[i, t]`` is True iff turn t has at least one token with ``tok_mask`` True
    (:func:`drkernel.turns.tokens_to_turns` and :func:`drkernel.turns.turn_exists`).

    Args:
        tok_rewards: float ``(N, L)``, rewards placed on turn-end tokens, 0 elsewhere.
        tok_turn_index: int ``(N, L)``, 0-based turn of each token, -1 for tokens outside every
            trained turn (prompt, environment feedback, padding).
        tok_mask: bool ``(N, L)``, tokens that are trained.
        max_turns: T; default ``max(tok_turn_index) + 1``.

    Returns:
        ``(turn_rewards (N, T), turn_mask (N, T) bool)``.

    Raises:
        ValueError: shapes/dtypes wrong, turn index < -1 or >= max_turns, or a non-zero reward on
            a token with turn index -1 (the reward would be silently lost).
    """
    if tok_rewards.dim() != 2:
        raise ValueError(f"tok_rewards must be 2-D (N, L), got shape {tuple(tok_rewards.shape)}")
    num_turns = _check_token_inputs(tok_turn_index, tok_mask, tok_rewards.shape, max_turns)
    if bool(((tok_turn_index < 0) & (tok_rewards != 0)).any()):
        raise ValueError("tok_rewards is non-zero on tokens with tok_turn_index == -1")
    turn_rewards = tokens_to_turns(tok_rewards, tok_turn_index, num_turns)
    return turn_rewards, turn_exists(tok_turn_index, tok_mask, num_turns)


def turn_mask_from_tokens(
    tok_turn_index: torch.Tensor, tok_mask: torch.Tensor, num_turns: int
) -> torch.Tensor:
    """``(N, T)`` bool: turn t of row i exists and has at least one trained token
    (:func:`drkernel.turns.turn_exists`)."""
    return turn_exists(tok_turn_index, tok_mask, num_turns)


def turn_to_token(
    turn_values: torch.Tensor, tok_turn_index: torch.Tensor, tok_mask: torch.Tensor
) -> torch.Tensor:
    """Broadcast per-turn values ``(N, T)`` onto tokens ``(N, L)``; 0 outside ``tok_mask`` and
    on tokens with turn index -1 (:func:`drkernel.turns.turns_to_tokens`)."""
    n, num_turns = turn_values.shape
    _check_token_inputs(tok_turn_index, tok_mask, tok_turn_index.shape, num_turns)
    if tok_turn_index.shape[0] != n:
        raise ValueError(f"turn_values has N={n} rows but tok_turn_index has {tok_turn_index.shape[0]}")
    return turns_to_tokens(turn_values, tok_turn_index, tok_mask)


def token_level_advantages(
    tok_rewards: torch.Tensor,
    tok_turn_index: torch.Tensor,
    tok_mask: torch.Tensor,
    group_ids: GroupIds,
    gamma: float = 1.0,
    estimator: str = "trloo",
    max_turns: int | None = None,
    turn_mask: torch.Tensor | None = None,
    **knobs: object,
) -> torch.Tensor:
    """Token-level advantages from a per-turn estimator (default TRLOO).

    r_{i,t} = sum of the turn's token rewards; A = estimator(r, group_ids, turn_mask, gamma);
    token l of row i gets A_{i, turn(l)} if it is trained, else 0.

    Args:
        tok_rewards: float ``(N, L)``, turn rewards placed on turn-end tokens.
        tok_turn_index: int ``(N, L)``, 0-based turn index, -1 outside trained turns.
        tok_mask: bool ``(N, L)``, trained tokens.
        group_ids: length-N ids (ints or strings) or 1-D int tensor.
        gamma: discount across turns.
        estimator: registered estimator name ("trloo", "grpo", "rloo", ...).
        max_turns: T; default ``max(tok_turn_index) + 1``.
        turn_mask: optional bool ``(N, T)`` deciding which turns enter the groups. Default: a turn
            is valid iff it has a trained token. Pass the pre-rejection mask here to keep turns
            rejected by MRS/PRS in their peers' baselines, as Dr. Kernel does (it groups by
            ``loss_mask``, not by the rejection-modified response mask),
            while ``tok_mask`` (post-rejection) still zeroes their own tokens.
        **knobs: extra keyword arguments for the estimator (e.g. ``norm_by_std=True``).

    Returns:
        tok_advantages: ``(N, L)``.
    """
    turn_rewards, derived_mask = token_to_turn_rewards(tok_rewards, tok_turn_index, tok_mask, max_turns)
    if turn_mask is None:
        turn_mask = derived_mask
    elif turn_mask.shape != turn_rewards.shape:
        raise ValueError(f"turn_mask shape {tuple(turn_mask.shape)} != (N, T) {tuple(turn_rewards.shape)}")
    turn_adv = get_advantage(estimator)(turn_rewards, group_ids, turn_mask, gamma, **knobs)
    return turn_to_token(turn_adv, tok_turn_index, tok_mask)


def row_level_advantages(
    row_rewards: torch.Tensor,
    row_traj_ids: GroupIds,
    row_turn_index: torch.Tensor,
    row_loss_mask: torch.Tensor,
    row_group_ids: GroupIds,
    gamma: float = 1.0,
    estimator: str = "trloo",
    max_turns: int | None = None,
    **knobs: object,
) -> torch.Tensor:
    """Advantages for the one-row-per-(trajectory, turn) layout of Dr. Kernel's verl code.

    Rows of trajectory i with ``row_turn_index`` k >= 1 fill cell (i, k-1) of an ``(N, T)`` grid;
    padding rows (index -1, front padding in Dr. Kernel) fill nothing. ``turn_mask`` is the rows'
    ``loss_mask`` (a cell with no row is masked). The estimator runs on the grid and each row
    gets its cell's advantage (0 for padding and ``loss_mask=0`` rows).

    Args:
        row_rewards: float ``(R,)``, the turn's scalar reward (sum of its token-level scores).
        row_traj_ids: length-R ids (ints, strings or 1-D int tensor) naming each row's trajectory.
        row_turn_index: int ``(R,)``, 1-based absolute turn index, -1 for padding rows.
        row_loss_mask: ``(R,)`` bool, or integer 0/1 as stored by Dr. Kernel.
        row_group_ids: length-R prompt ids (``uid``); all real rows of a trajectory must agree.
        gamma: discount across turns.
        estimator: registered estimator name.
        max_turns: T; default ``max(row_turn_index)``.
        **knobs: extra keyword arguments for the estimator.

    Returns:
        row_advantages: ``(R,)``. Token advantages: ``row_advantages[:, None] * response_mask``.

    Raises:
        ValueError: shapes, a turn index of 0 or < -1 or > max_turns, a duplicate
            (trajectory, turn), a loss mask that is not 0/1, or one trajectory with two groups.
    """
    if row_rewards.dim() != 1:
        raise ValueError(f"row_rewards must be 1-D (R,), got shape {tuple(row_rewards.shape)}")
    r = row_rewards.shape[0]
    device = row_rewards.device
    if row_turn_index.shape != (r,) or row_turn_index.dtype not in _INT_DTYPES:
        raise ValueError(
            f"row_turn_index must be an integer tensor of shape (R,) = ({r},), got "
            f"{tuple(row_turn_index.shape)} {row_turn_index.dtype}"
        )
    if row_loss_mask.shape != (r,):
        raise ValueError(f"row_loss_mask shape {tuple(row_loss_mask.shape)} != (R,) = ({r},)")
    if row_loss_mask.dtype != torch.bool:
        not_binary = (row_loss_mask != 0) & (row_loss_mask != 1)
        if row_loss_mask.dtype not in _INT_DTYPES or bool(not_binary.any()):
            raise ValueError(f"row_loss_mask must be bool or integer 0/1, got {row_loss_mask.dtype}")
        row_loss_mask = row_loss_mask.bool()
    row_loss_mask = row_loss_mask.to(device)
    cells = row_cells(row_traj_ids, row_turn_index, max_turns)  # (i, t) cell of each row
    n, num_turns = cells.num_traj, cells.num_turns
    row_gid, _ = dense_group_ids(row_group_ids, r, device)  # prompt group of each row, (R,)
    if num_turns == 0 or n == 0:
        return torch.zeros_like(row_rewards, dtype=_float(row_rewards))

    cell, traj = cells.cell.to(device), cells.traj.to(device)
    real = cell >= 0
    real_cell = cell[real]
    traj_group = torch.zeros(n, dtype=torch.long, device=device)
    traj_group[traj[real]] = row_gid[real]
    if bool((traj_group[traj[real]] != row_gid[real]).any()):
        raise ValueError("rows of one trajectory carry different group ids")

    dtype = _float(row_rewards)
    turn_rewards = torch.zeros(n * num_turns, dtype=dtype, device=device)
    turn_rewards[real_cell] = row_rewards[real].to(dtype)  # r_{i,t} from row (i, t)
    turn_mask = torch.zeros(n * num_turns, dtype=torch.bool, device=device)
    turn_mask[real_cell] = row_loss_mask[real]  # missing turns stay masked
    turn_adv = get_advantage(estimator)(
        turn_rewards.view(n, num_turns), traj_group, turn_mask.view(n, num_turns), gamma, **knobs
    )
    zero = torch.zeros((), dtype=dtype, device=device)
    return torch.where(real, turn_adv.reshape(-1)[cell.clamp(min=0)], zero)  # row gets A of its cell


def _float(t: torch.Tensor) -> torch.dtype:
    return t.dtype if t.dtype.is_floating_point else torch.get_default_dtype()
