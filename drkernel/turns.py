"""The one turn table: each trajectory's per-turn rows, and the token <-> turn layout.

Everything in drkernel that turns a trajectory into per-turn values, or moves values between a
token row and its turns, goes through this module: the agent (``turn_tensors``), the local
trainer's packing, verl's agent loop and step adapter, the token-level advantage adapters, the
training step and the per-turn metrics.

**Why here** (``drkernel/turns.py``, a leaf): it imports torch and nothing of drkernel at run
time, so every layer can use it without an upward import. The advantage estimators
(``drkernel.advantages``) are the lowest layer that needs the token layout; ``drkernel.step``
and ``drkernel.agent`` sit above them, so the layout cannot live in either. The table reads a
:class:`drkernel.agent.types.Trajectory` by duck typing (``turns``, ``failed``), which also
accepts the toy task's trajectories.

**Turn table** (:func:`turn_rows`, :func:`turn_table`). Row t of a trajectory describes its
turn t (0-based position in ``trajectory.turns``):

- ``reward``: ``turn.reward``; ``meaningful``: ``turn.meaningful`` (the meaningful-turn flag);
- from the grader's verdict ``turn.result`` (None = nothing graded: ``graded`` False, every flag
  False, numbers NaN): ``compiled``, ``correct``, ``hacked``, ``speedup``, ``coverage``;
  ``passed = compiled and correct and not hacked`` (what PRS and the metrics call correct);
- ``token_span``: ``[start, end)`` of the reply's tokens in the trajectory's token stream (the
  first prompt included): ``start = len(generation.prompt_token_ids)``,
  ``end = start + len(generation.token_ids)``; None without a generation, without tokens, or
  without prompt token ids. ``num_tokens = len(generation.token_ids)`` (0 without).

:func:`turn_table` stacks the rows of N trajectories into ``(N, T)`` tensors, back-padded with
absent turns (``exists`` False, reward 0, flags False, numbers NaN, spans -1).

**Token layout** (pure functions, no loops over tokens). N rows of L tokens, T turns;
``tok_turn_index[i, l]`` is the 0-based turn of token l of row i, or -1 for a token of no turn
(prompt, environment feedback, padding). The tokens of turn t are ``{l : tok_turn_index[i, l] == t}``.

- :func:`tokens_to_turns`: ``v_{i,t} = sum of tok_values[i, l]`` over the tokens of turn t
  (token -> turn by scatter-add; with rewards placed on each turn's last token it reads back
  the turn reward);
- :func:`turns_to_tokens`: ``tok[i, l] = turn_values[i, turn(l)]``, 0/False on tokens of no turn
  or outside ``tok_mask`` (turn -> token by gather, broadcast onto every token of the turn);
- :func:`turns_to_last_tokens`: ``turn_values[i, t]`` on the last token of turn t only, 0 elsewhere
  (how verl's ``rm_scores`` carries turn rewards); ``tokens_to_turns`` inverts it;
- :func:`turn_boundaries`: ``(first, last)`` token position of each turn, -1 where it has none;
- :func:`turn_exists`: turn t of row i has at least one token (in ``tok_mask``);
- :func:`turn_index_from_mask`: turns recovered as the maximal runs of 1 in a response mask;
- :func:`row_cells`: the one-row-per-(trajectory, turn) layout's rows -> ``(N, T)`` cells.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, Any

import torch

if TYPE_CHECKING:
    from drkernel.agent.types import Trajectory

__all__ = [
    "TurnRow",
    "TurnTable",
    "result_fields",
    "turn_rows",
    "turn_table",
    "tokens_to_turns",
    "turns_to_tokens",
    "turns_to_last_tokens",
    "turn_boundaries",
    "turn_exists",
    "turn_index_from_mask",
    "row_cells",
]

_INT_DTYPES = (torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8)


# --------------------------------------------------------------------------- the turn table


def _get(result: Any, key: str, default: Any) -> Any:
    if isinstance(result, Mapping):
        return result.get(key, default)
    return getattr(result, key, default)


def _num(value: Any) -> float:
    return math.nan if value is None else float(value)


def result_fields(result: Any) -> dict[str, Any]:
    """The verdict columns of one evaluation result (an ``EvalResult``, or a dict with its keys).

    ``compiled`` defaults to True when the result does not say (a dict with only ``correct``),
    ``correct``/``hacked`` to False, ``speedup``/``coverage`` to NaN. None (nothing graded) gives
    ``graded`` False and every flag False.
    """
    if result is None:
        return {"graded": False, "compiled": False, "correct": False, "hacked": False,
                "speedup": math.nan, "coverage": math.nan}
    return {"graded": True, "compiled": bool(_get(result, "compiled", True)),
            "correct": bool(_get(result, "correct", False)), "hacked": bool(_get(result, "hacked", False)),
            "speedup": _num(_get(result, "speedup", None)), "coverage": _num(_get(result, "coverage", None))}


@dataclass(frozen=True)
class TurnRow:
    """One turn of a trajectory (module docstring, "Turn table")."""

    index: int
    """0-based position of the turn in its trajectory."""
    reward: float
    meaningful: bool
    graded: bool
    compiled: bool
    correct: bool
    hacked: bool
    speedup: float
    """NaN = none."""
    coverage: float
    """Triton coverage of the turn's kernel; NaN = none."""
    num_tokens: int
    token_span: tuple[int, int] | None
    """``[start, end)`` of the reply's tokens in the trajectory's token stream; None = unknown/none."""

    @property
    def passed(self) -> bool:
        return self.compiled and self.correct and not self.hacked


def turn_rows(trajectory: "Trajectory") -> list[TurnRow]:
    """The per-turn table of one trajectory: one :class:`TurnRow` per entry of ``trajectory.turns``.

    This is the only function that reads turns' fields for training and metrics. A turn needs
    ``reward``; ``meaningful`` (default True), ``result`` and ``generation`` (default None) are
    read when present.
    """
    rows = []
    for t, turn in enumerate(trajectory.turns):
        gen = getattr(turn, "generation", None)
        ids = getattr(gen, "token_ids", None) or []
        prompt = getattr(gen, "prompt_token_ids", None)
        span = (len(prompt), len(prompt) + len(ids)) if ids and prompt is not None else None
        rows.append(TurnRow(index=t, reward=float(turn.reward), meaningful=bool(getattr(turn, "meaningful", True)),
                            **result_fields(getattr(turn, "result", None)), num_tokens=len(ids), token_span=span))
    return rows


@dataclass
class TurnTable:
    """The turn tables of N trajectories as ``(N, T)`` tensors (absent turns back-padded)."""

    exists: torch.Tensor
    """bool: the trajectory played turn t (it is in ``trajectory.turns``)."""
    reward: torch.Tensor
    """float64, 0 where absent."""
    meaningful: torch.Tensor
    """bool, False where absent."""
    graded: torch.Tensor
    compiled: torch.Tensor
    correct: torch.Tensor
    hacked: torch.Tensor
    speedup: torch.Tensor
    """float64, NaN = none."""
    coverage: torch.Tensor
    """float64, NaN = none."""
    num_tokens: torch.Tensor
    """int64 tokens of the reply, 0 where absent."""
    token_start: torch.Tensor
    """int64 start of the reply's tokens in the trajectory's stream, -1 = none/unknown."""
    token_end: torch.Tensor
    """int64 end (exclusive), -1 = none/unknown."""
    failed: torch.Tensor
    """(N,) bool: the trajectory ended in an error (``trajectory.failed``)."""

    @property
    def passed(self) -> torch.Tensor:
        """(N, T) bool: compiled, correct and not hacked."""
        return self.compiled & self.correct & ~self.hacked

    @property
    def num_turns(self) -> int:
        return int(self.exists.shape[1])

    @classmethod
    def from_rows(cls, rows: Sequence[Sequence[TurnRow]], num_turns: int | None = None,
                  failed: Sequence[bool] | None = None) -> "TurnTable":
        """Stack per-trajectory rows; ``num_turns`` defaults to the longest (raises if one is longer)."""
        n = len(rows)
        t_max = max((len(r) for r in rows), default=0) if num_turns is None else int(num_turns)
        cols: dict[str, list[list[Any]]] = {}
        pad = {"exists": False, "reward": 0.0, "meaningful": False, "graded": False, "compiled": False,
               "correct": False, "hacked": False, "speedup": math.nan, "coverage": math.nan, "num_tokens": 0,
               "token_start": -1, "token_end": -1}
        for name in pad:
            cols[name] = [[pad[name]] * t_max for _ in range(n)]
        for i, traj_rows in enumerate(rows):
            if len(traj_rows) > t_max:
                raise ValueError(f"trajectory {i} has {len(traj_rows)} turns, more than num_turns={t_max}")
            for t, row in enumerate(traj_rows):
                values = {f.name: getattr(row, f.name) for f in fields(row)}
                span = values.pop("token_span")
                values.pop("index")
                values["exists"] = True
                values["token_start"], values["token_end"] = span if span is not None else (-1, -1)
                for name, v in values.items():
                    cols[name][i][t] = v
        dtypes = {"reward": torch.float64, "speedup": torch.float64, "coverage": torch.float64,
                  "num_tokens": torch.long, "token_start": torch.long, "token_end": torch.long}
        tensors = {k: torch.tensor(v, dtype=dtypes.get(k, torch.bool)).reshape(n, t_max) for k, v in cols.items()}
        fail = torch.zeros(n, dtype=torch.bool) if failed is None else torch.tensor(list(failed), dtype=torch.bool)
        return cls(**tensors, failed=fail.reshape(n))

    def row(self, i: int) -> dict[str, list[Any]]:
        """Row i as lists of length T (e.g. for one verl agent-loop output)."""
        return {f.name: getattr(self, f.name)[i].tolist() for f in fields(self) if f.name != "failed"}


def turn_table(trajectories: Sequence["Trajectory"], num_turns: int | None = None) -> TurnTable:
    """``(N, T)`` turn table of ``trajectories`` (:func:`turn_rows` of each, stacked).

    Args:
        trajectories: N trajectories (``turns``, optional ``failed``).
        num_turns: T; default the longest trajectory's turn count.

    Raises:
        ValueError: a trajectory has more than ``num_turns`` turns.
    """
    return TurnTable.from_rows([turn_rows(tr) for tr in trajectories], num_turns,
                               failed=[bool(getattr(tr, "failed", False)) for tr in trajectories])


# --------------------------------------------------------------------------- token <-> turn layout


def _check_index(tok_turn_index: torch.Tensor) -> torch.Tensor:
    if tok_turn_index.dim() != 2:
        raise ValueError(f"tok_turn_index must be 2-D (N, L), got shape {tuple(tok_turn_index.shape)}")
    if tok_turn_index.dtype not in _INT_DTYPES:
        raise ValueError(f"tok_turn_index must be an integer tensor, got {tok_turn_index.dtype}")
    return tok_turn_index.long()


def _resolve_turns(ti: torch.Tensor, num_turns: int | None) -> int:
    seen = int(ti.max()) + 1 if ti.numel() else 0
    if num_turns is None:
        return max(seen, 0)
    if seen > num_turns:
        raise ValueError(f"tok_turn_index has turn {seen - 1} but num_turns={num_turns}")
    return int(num_turns)


def _cells(ti: torch.Tensor, num_turns: int) -> torch.Tensor:
    """Flat ``(i, t)`` cell ``i T + t`` of every token (tokens of no turn: cell of turn 0)."""
    rows = torch.arange(ti.shape[0], device=ti.device)[:, None]
    return rows * num_turns + ti.clamp(min=0)


def tokens_to_turns(tok_values: torch.Tensor, tok_turn_index: torch.Tensor,
                    num_turns: int | None = None) -> torch.Tensor:
    """Token -> turn: ``(N, T)`` with ``v_{i,t} = sum of tok_values[i, l]`` over the tokens of turn t.

    Every token of the turn counts (a mask plays no part: the reward usually sits on the turn's
    last token, which may be masked out). Integer or bool values are summed as floats of the
    default dtype.

    Args:
        tok_values: ``(N, L)``.
        tok_turn_index: int ``(N, L)``, -1 = no turn.
        num_turns: T; default ``max(tok_turn_index) + 1``.

    Raises:
        ValueError: a non-zero value on a token of no turn (it would be lost), or a turn >= T.

    Example: values ``[[0, 2, 0, 5]]``, turns ``[[0, 0, -1, 1]]`` -> ``[[2, 5]]``.
    """
    ti = _check_index(tok_turn_index)
    if tok_values.shape != ti.shape:
        raise ValueError(f"tok_values {tuple(tok_values.shape)} and tok_turn_index {tuple(ti.shape)} differ")
    num_turns = _resolve_turns(ti, num_turns)
    if not tok_values.dtype.is_floating_point:
        tok_values = tok_values.to(torch.get_default_dtype())
    inside = ti >= 0
    if bool((~inside & (tok_values != 0)).any()):
        raise ValueError("a non-zero token value sits on a token with no turn (tok_turn_index -1)")
    n = ti.shape[0]
    out = torch.zeros(n * num_turns, dtype=tok_values.dtype, device=tok_values.device)
    if num_turns:
        out.index_add_(0, _cells(ti, num_turns)[inside].to(out.device), tok_values[inside])
    return out.view(n, num_turns)


def turns_to_tokens(turn_values: torch.Tensor, tok_turn_index: torch.Tensor,
                    tok_mask: torch.Tensor | None = None) -> torch.Tensor:
    """Turn -> token: ``(N, L)`` with ``tok[i, l] = turn_values[i, turn(l)]`` (broadcast to every token
    of the turn); 0 (False for bool values) on tokens of no turn and outside ``tok_mask``.

    Args:
        turn_values: ``(N, T)``, any dtype.
        tok_turn_index: int ``(N, L)``, -1 = no turn; every turn must be < T.
        tok_mask: optional bool ``(N, L)``.

    Example: values ``[[2, 5]]``, turns ``[[0, 0, -1, 1]]`` -> ``[[2, 2, 0, 5]]``.
    """
    ti = _check_index(tok_turn_index).to(turn_values.device)
    if turn_values.dim() != 2 or turn_values.shape[0] != ti.shape[0]:
        raise ValueError(f"turn_values must be (N, T) with N = {ti.shape[0]}, got {tuple(turn_values.shape)}")
    num_turns = turn_values.shape[1]
    _resolve_turns(ti, num_turns)
    zero = torch.zeros((), dtype=turn_values.dtype, device=turn_values.device)
    if num_turns == 0:
        return torch.zeros(ti.shape, dtype=turn_values.dtype, device=turn_values.device)
    keep = ti >= 0
    if tok_mask is not None:
        if tok_mask.shape != ti.shape:
            raise ValueError(f"tok_mask {tuple(tok_mask.shape)} != tok_turn_index {tuple(ti.shape)}")
        keep = keep & tok_mask.bool().to(ti.device)
    picked = turn_values.gather(1, ti.clamp(min=0))
    return torch.where(keep, picked, zero)


def turn_boundaries(tok_turn_index: torch.Tensor, num_turns: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """``(first, last)``, each ``(N, T)`` int64: the first and last token position of turn t in row i,
    -1 where the turn has no token.

    Example: turns ``[[-1, 0, 0, -1, 1]]`` -> first ``[[1, 4]]``, last ``[[2, 4]]``.
    """
    ti = _check_index(tok_turn_index)
    num_turns = _resolve_turns(ti, num_turns)
    n, length = ti.shape
    inside = ti >= 0
    pos = torch.arange(length, device=ti.device).expand(n, length)
    cells = _cells(ti, num_turns)[inside]
    last = torch.full((n * num_turns,), -1, dtype=torch.long, device=ti.device)
    first = torch.full((n * num_turns,), length, dtype=torch.long, device=ti.device)
    if num_turns:
        last.scatter_reduce_(0, cells, pos[inside], reduce="amax")
        first.scatter_reduce_(0, cells, pos[inside], reduce="amin")
    first = torch.where(first == length, torch.full_like(first, -1), first)
    return first.view(n, num_turns), last.view(n, num_turns)


def turns_to_last_tokens(turn_values: torch.Tensor, tok_turn_index: torch.Tensor) -> torch.Tensor:
    """``(N, L)``: ``turn_values[i, t]`` on the last token of turn t, 0 on every other token.

    :func:`tokens_to_turns` inverts it on turns that have a token (a turn with none keeps no value).

    Example: values ``[[2, 5]]``, turns ``[[0, 0, -1, 1]]`` -> ``[[0, 2, 0, 5]]``.
    """
    ti = _check_index(tok_turn_index).to(turn_values.device)
    if turn_values.dim() != 2 or turn_values.shape[0] != ti.shape[0]:
        raise ValueError(f"turn_values must be (N, T) with N = {ti.shape[0]}, got {tuple(turn_values.shape)}")
    _, last = turn_boundaries(ti, turn_values.shape[1])
    out = torch.zeros(ti.shape, dtype=turn_values.dtype, device=turn_values.device)
    has = last >= 0
    rows = torch.arange(ti.shape[0], device=ti.device)[:, None].expand_as(last)
    out[rows[has], last[has]] = turn_values[has]
    return out


def turn_exists(tok_turn_index: torch.Tensor, tok_mask: torch.Tensor | None = None,
                num_turns: int | None = None) -> torch.Tensor:
    """``(N, T)`` bool: turn t of row i has at least one token (with ``tok_mask`` True, if given).

    Example: turns ``[[0, 0, -1, 1]]``, mask ``[[1, 1, 0, 0]]``, T = 3 -> ``[[True, False, False]]``.
    """
    ti = _check_index(tok_turn_index)
    num_turns = _resolve_turns(ti, num_turns)
    keep = ti >= 0
    if tok_mask is not None:
        if tok_mask.shape != ti.shape:
            raise ValueError(f"tok_mask {tuple(tok_mask.shape)} != tok_turn_index {tuple(ti.shape)}")
        keep = keep & tok_mask.bool().to(ti.device)
    n = ti.shape[0]
    counts = torch.bincount(_cells(ti, max(num_turns, 1))[keep], minlength=n * num_turns)
    return (counts > 0).view(n, num_turns)


def turn_index_from_mask(response_mask: torch.Tensor) -> torch.Tensor:
    """``(N, L)`` int64: the 0-based turn of each masked token, counting maximal runs of 1s; -1
    elsewhere (a layout whose turns are separated by feedback tokens, as every multi-turn loop
    in verl produces).

    Example: mask ``[1, 1, 0, 0, 1, 0, 1]`` gives ``[0, 0, -1, -1, 1, -1, 2]``.
    """
    mask = response_mask.bool()
    prev = torch.zeros_like(mask)
    prev[:, 1:] = mask[:, :-1]
    starts = mask & ~prev  # first token of each run
    run = torch.cumsum(starts.long(), dim=1) - 1  # run number of each token
    return torch.where(mask, run, torch.full_like(run, -1))


@dataclass
class RowCells:
    """Rows of the one-row-per-(trajectory, turn) layout placed on an ``(N, T)`` grid."""

    cell: torch.Tensor
    """(R,) int64: flat cell ``i T + (t - 1)`` of each real row, -1 for padding rows."""
    traj: torch.Tensor
    """(R,) int64: trajectory (0..N-1, in order of first appearance) of each row, padding rows included."""
    num_traj: int
    num_turns: int
    traj_ids: list[Any]
    """Length-N trajectory ids."""


def row_cells(row_traj_ids: Sequence[Any] | torch.Tensor, row_turn_index: torch.Tensor,
              max_turns: int | None = None) -> RowCells:
    """Cells of the turn rows of Dr. Kernel's verl layout: the row of trajectory i with 1-based turn
    index k >= 1 is cell ``(i, k - 1)``; padding rows (index -1) have none.

    Raises:
        ValueError: a turn index of 0 or < -1 or > ``max_turns``, lengths differ, or two rows
            claim the same (trajectory, turn).

    Example: trajectories ``[a, a, b]``, turns ``[1, 2, 1]`` -> N = 2, T = 2, cells ``[0, 1, 2]``.
    """
    ids = row_traj_ids.tolist() if hasattr(row_traj_ids, "tolist") else list(row_traj_ids)
    turn = torch.as_tensor(row_turn_index)
    if turn.dim() != 1 or turn.numel() != len(ids) or (turn.numel() and turn.dtype not in _INT_DTYPES):
        raise ValueError(f"row_turn_index must be an integer tensor of shape (R,) = ({len(ids)},), got "
                         f"{tuple(turn.shape)} {turn.dtype}")
    turn = turn.long().cpu()
    if bool(((turn == 0) | (turn < -1)).any()):
        raise ValueError("row_turn_index must be 1-based (>= 1) or -1 for padding rows")
    num_turns = int(turn.max()) if turn.numel() else 0
    if max_turns is not None:
        if num_turns > max_turns:
            raise ValueError(f"row_turn_index has turn {num_turns} but max_turns={max_turns}")
        num_turns = int(max_turns)
    num_turns = max(num_turns, 0)
    codes: dict[Any, int] = {}
    traj = torch.tensor([codes.setdefault(x, len(codes)) for x in ids], dtype=torch.long)
    real = turn >= 1
    cell = torch.where(real, traj * num_turns + (turn - 1).clamp(min=0), torch.full_like(turn, -1))
    real_cells = cell[real]
    if real_cells.numel() and int(torch.bincount(real_cells).max()) > 1:
        raise ValueError("two rows share the same (trajectory, turn)")
    return RowCells(cell=cell, traj=traj, num_traj=len(codes), num_turns=num_turns, traj_ids=list(codes))
