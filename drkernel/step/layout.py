"""Layout converter: Dr. Kernel's one-row-per-(trajectory, turn) batch <-> the step's layout.

Dr. Kernel's verl code flattens a rollout into one row per (sample, turn), missing turns
front-padded: each row's response is that turn's tokens, ``turn_indices`` is 1-based with -1 on
front padding rows. :func:`dr_kernel_step` wants one row per trajectory with a per-token turn index.
:class:`TurnRowPacking` maps between the two without copying any logic: turn t of trajectory i
becomes the token block ``[t L, (t + 1) L)`` of packed row i (R rows of L tokens -> N rows of
T L tokens), per-row scalars become ``(N, T)`` cells, and results map back to rows.

Example: rows ``traj = [a, a, b]``, ``turn = [1, 2, 1]``, L = 2 pack into N = 2, T = 2 rows of
4 tokens; row 2 (b, turn 1) lands in packed row 1, tokens 0-1; cell (b, turn 2) is empty.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

from drkernel.turns import row_cells

__all__ = ["TurnRowPacking"]


@dataclass
class TurnRowPacking:
    """Index maps between R turn rows (each L tokens) and N packed trajectories (T L tokens)."""

    cell: torch.Tensor
    """(R,) int64: flat cell ``i T + (t - 1)`` of each real row, -1 for padding rows."""
    num_traj: int
    """N, trajectories in order of first appearance."""
    num_turns: int
    """T."""
    length: int
    """L, tokens per turn row."""
    traj_ids: list[Any]
    """Length-N trajectory ids."""
    traj_of_row: torch.Tensor
    """(R,) int64: packed row of each turn row (also for padding rows)."""

    @classmethod
    def build(
        cls,
        row_traj_ids: Sequence[Any] | torch.Tensor,
        row_turn_index: torch.Tensor,
        length: int,
        max_turns: int | None = None,
    ) -> "TurnRowPacking":
        """Maps for rows with the given trajectory ids and 1-based turn indices (-1 = padding)
        (:func:`drkernel.turns.row_cells`).

        Raises:
            ValueError: a turn index of 0 or < -1 or > max_turns, lengths differ, or two rows
                claim the same (trajectory, turn).
        """
        c = row_cells(row_traj_ids, row_turn_index, max_turns)
        return cls(cell=c.cell, num_traj=c.num_traj, num_turns=c.num_turns, length=int(length),
                   traj_ids=c.traj_ids, traj_of_row=c.traj)

    def pack_tokens(self, values: torch.Tensor, fill: float | int | bool = 0) -> torch.Tensor:
        """(R, L) per-token values -> (N, T L); padding rows and empty cells become ``fill``."""
        r, length = values.shape
        if r != self.cell.numel() or length != self.length:
            raise ValueError(f"expected ({self.cell.numel()}, {self.length}), got {tuple(values.shape)}")
        out = torch.full((self.num_traj * self.num_turns, length), fill, dtype=values.dtype, device=values.device)
        real = (self.cell >= 0).to(values.device)
        out[self.cell.to(values.device)[real]] = values[real]
        return out.view(self.num_traj, self.num_turns * length)

    def tok_turn_index(self, response_mask: torch.Tensor) -> torch.Tensor:
        """(N, T L) 0-based turn of each packed token in ``response_mask`` (R, L), -1 elsewhere."""
        turns = torch.arange(self.num_turns, device=response_mask.device).repeat_interleave(self.length)
        mask = self.pack_tokens(response_mask.bool(), False)
        return torch.where(mask, turns[None, :].expand_as(mask), torch.full_like(mask, -1, dtype=torch.long))

    def pack_turns(self, values: torch.Tensor | Sequence[Any], fill: float | int | bool = 0) -> torch.Tensor:
        """(R,) per-row values (a turn's reward, correctness, coverage) -> (N, T) cells."""
        v = torch.as_tensor(values)
        if v.shape != (self.cell.numel(),):
            raise ValueError(f"expected ({self.cell.numel()},), got {tuple(v.shape)}")
        out = torch.full((self.num_traj * self.num_turns,), fill, dtype=v.dtype, device=v.device)
        real = (self.cell >= 0).to(v.device)
        out[self.cell.to(v.device)[real]] = v[real]
        return out.view(self.num_traj, self.num_turns)

    def traj_values(self, row_values: Sequence[Any] | torch.Tensor) -> list[Any]:
        """Length-N per-trajectory values (e.g. prompt ids) from per-row values; rows of one
        trajectory must agree (raises otherwise)."""
        vals = row_values.tolist() if hasattr(row_values, "tolist") else list(row_values)
        out: list[Any] = [None] * self.num_traj
        seen = [False] * self.num_traj
        for j, v in zip(self.traj_of_row.tolist(), vals):
            if seen[j] and out[j] != v:
                raise ValueError(f"rows of trajectory {self.traj_ids[j]!r} disagree: {out[j]!r} vs {v!r}")
            out[j], seen[j] = v, True
        return out

    def unpack_tokens(self, values: torch.Tensor, traj_rows: torch.Tensor | None = None) -> torch.Tensor:
        """(K, T L) packed values of trajectories ``traj_rows`` (default all N) -> (R, L) rows.

        Rows whose trajectory is not among ``traj_rows``, and padding rows, get 0. Use it with
        ``StepResult.kept_rows`` (when no buffer was involved) to write advantages and the loss
        mask back onto the turn rows; rows that come back all-zero in the mask are dead.
        """
        k = values.shape[0]
        rows = torch.arange(self.num_traj) if traj_rows is None else traj_rows.long().cpu()
        if rows.numel() != k or values.shape[1] != self.num_turns * self.length:
            raise ValueError(f"expected ({rows.numel()}, {self.num_turns * self.length}), got {tuple(values.shape)}")
        full = torch.zeros((self.num_traj, self.num_turns * self.length), dtype=values.dtype, device=values.device)
        full[rows.to(values.device)] = values
        flat = full.view(self.num_traj * self.num_turns, self.length)
        real = (self.cell >= 0).to(values.device)
        out = torch.zeros((self.cell.numel(), self.length), dtype=values.dtype, device=values.device)
        out[real] = flat[self.cell.to(values.device)[real]]
        return out
