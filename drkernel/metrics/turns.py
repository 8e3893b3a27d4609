"""Per-turn training metrics with flat names, ``turn{t}/fast@1.2``, for trainers' dashboards.

A thin layer over :func:`drkernel.metrics.kernel.kernel_metrics` that (1) accepts the trajectories'
evaluation results as nested lists (one list of per-turn results per trajectory; trajectories may
have different numbers of turns) and (2) renames the keys into the trainers' namespaces:

- ``turn{t}/correct``: share of samples with turn t whose kernel passes (correct, not hacked);
- ``turn{t}/fast@p``: the paper's Fast@p, #(pass and s >= p) / #samples with turn t;
- ``turn{t}/geomean_speedup``: over passing kernels of turn t;
- ``turn{t}/hack_rate``: hacked turns / existing turns t;
- ``turn{t}/num_samples``;
- ``best/correct``, ``best/fast@p``: the same for the best turn of each sample across all its
  turns (the paper's "best across all turns");
- ``turn{t}/reward_mean`` when per-turn rewards are given.

t is 1-based. A metric with an empty denominator is ``nan`` (``kernel_metrics``'s convention).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import torch

from drkernel.turns import TurnRow, TurnTable, result_fields

from .kernel import kernel_metrics

__all__ = ["TURN_FAST_THRESHOLDS", "results_to_turn_tensors", "turn_metrics"]

TURN_FAST_THRESHOLDS: tuple[float, ...] = (1.0, 1.2)
"""Fast@p thresholds logged per turn by default (the paper reports Fast@1 and Fast@1.2)."""


def results_to_turn_tensors(results: Sequence[Sequence[Any]]) -> dict[str, torch.Tensor]:
    """Nested per-trajectory, per-turn evaluation results -> (N, T) tensors (the verdict columns
    of the turn table, :class:`drkernel.turns.TurnTable`).

    Args:
        results: ``results[i][t]`` is the evaluation result (dict or object with ``correct``,
            ``hacked``, ``speedup``; ``compiled`` optional) of turn t of trajectory i; a turn may
            also be None (no kernel extracted: counts as an existing, failing turn).

    Returns:
        ``correct`` and ``hacked`` (N, T) bool (``correct`` requires compiled and correct),
        ``speedup`` (N, T) float64 (NaN where missing), ``exists`` (N, T) bool (trajectories
        shorter than T are padded at the back with non-existing turns).

    Example: ``[[{"correct": True, "speedup": 1.3}], []]`` gives correct ``[[True], [False]]``,
    exists ``[[True], [False]]``.
    """
    rows = [[TurnRow(index=t, reward=0.0, meaningful=True, **result_fields(res), num_tokens=0, token_span=None)
             for t, res in enumerate(traj)] for traj in results]
    table = TurnTable.from_rows(rows)
    return {"correct": table.correct & table.compiled, "hacked": table.hacked, "speedup": table.speedup,
            "exists": table.exists}


def turn_metrics(
    results: Sequence[Sequence[Any]] | None = None,
    *,
    correct: torch.Tensor | None = None,
    speedup: torch.Tensor | None = None,
    hacked: torch.Tensor | None = None,
    exists: torch.Tensor | None = None,
    turn_rewards: torch.Tensor | None = None,
    thresholds: Sequence[float] = TURN_FAST_THRESHOLDS,
) -> dict[str, float]:
    """Per-turn and best-across-turns metrics under flat ``turn{t}/`` and ``best/`` names.

    Pass either ``results`` (nested lists, see :func:`results_to_turn_tensors`) or the (N, T)
    tensors ``correct``, ``speedup`` (and optionally ``hacked``, ``exists``).

    Args:
        results: ``results[i][t]``, evaluation result of turn t of trajectory i.
        correct, speedup, hacked, exists: (N, T) tensors instead of ``results``.
        turn_rewards: (N, T) rewards, for ``turn{t}/reward_mean`` over existing turns.
        thresholds: the p of ``fast@p``.

    Returns:
        Flat dict of floats (module doc).

    Example: two samples, turns (pass s = 1.3, pass s = 0.9) and (fail, pass s = 1.25):
    ``turn1/correct`` 0.5, ``turn1/fast@1.2`` 0.5, ``turn2/correct`` 1.0, ``turn2/fast@1.2`` 0.5,
    ``best/fast@1.2`` 1.0.
    """
    if results is not None:
        t = results_to_turn_tensors(results)
        correct, speedup, hacked, exists = t["correct"], t["speedup"], t["hacked"], t["exists"]
    elif correct is None or speedup is None:
        raise ValueError("pass results, or the correct and speedup tensors")
    raw = kernel_metrics(correct, speedup, hacked, exists, thresholds=thresholds, prefix="k")
    num_turns = torch.as_tensor(correct).shape[1]
    out: dict[str, float] = {}
    for t in range(1, num_turns + 1):
        src = f"k/turn_{t}/"
        out[f"turn{t}/num_samples"] = raw[src + "num_samples"]
        out[f"turn{t}/correct"] = raw[src + "correctness_rate"]
        for p in thresholds:
            out[f"turn{t}/fast@{p:g}"] = raw[src + f"fast@{p:g}_in_all"]  # the paper's Fast@p
        out[f"turn{t}/geomean_speedup"] = raw[src + "geomean_speedup"]
        out[f"turn{t}/hack_rate"] = raw[src + "hack_rate"]
    if num_turns:
        best = f"k/best_by_turn_{num_turns}/"
        out["best/correct"] = raw[best + "correctness_rate"]
        for p in thresholds:
            out[f"best/fast@{p:g}"] = raw[best + f"fast@{p:g}_in_all"]
    if turn_rewards is not None:
        if isinstance(turn_rewards, torch.Tensor) or hasattr(turn_rewards, "__array__"):
            r = torch.as_tensor(turn_rewards).double()
        else:  # Python lists: straight to float64 (as_tensor would round through float32)
            r = torch.as_tensor(turn_rewards, dtype=torch.float64)
        ex = torch.ones_like(r, dtype=torch.bool) if exists is None else torch.as_tensor(exists).bool()
        for t in range(1, r.shape[1] + 1):
            col = ex[:, t - 1]
            out[f"turn{t}/reward_mean"] = float(r[col, t - 1].mean()) if bool(col.any()) else math.nan
    return out
