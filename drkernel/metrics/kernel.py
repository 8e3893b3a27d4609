"""Kernel-generation metrics per turn and best-by-turn: correctness, Fast@p, geomean speedup, hacking.

Inputs are per (sample, turn) results laid out as (N, T) tensors: sample i is one generated
trajectory (not one prompt: every sample counts), turn t its t-th turn. A turn *passes* when it is
correct and not hacked (hacked kernels count as incorrect).

Per turn t (keys ``{prefix}/turn_{t}/...``, t 1-based), over the samples that have turn t:

- ``num_samples``: samples with turn t.
- ``correctness_rate`` = #pass / #samples.
- ``fast@p`` = #(pass and s >= p) / #pass: Fast@p among correct kernels.
- ``fast@p_in_all`` = #(pass and s >= p) / #samples: the paper's Fast@p (incorrect counts as not
  fast). Dr. Kernel reports Fast@1 and Fast@1.2 this way.
- ``geomean_speedup`` = exp(mean log s) over passing kernels with a finite, positive speedup.
- ``hack_rate`` = #hacked / #samples (hacked turns over existing turns).

Best-by-turn t (keys ``{prefix}/best_by_turn_{t}/...``): each sample keeps its best passing speedup
among its turns <= t; a sample passes if any of those turns passes. Same keys as per turn, without
``hack_rate``; the denominators are samples with at least one turn <= t. The paper's "best across
all turns" is ``best_by_turn_T/fast@1.2_in_all``.

Also ``{prefix}/hack_rate`` over all existing turns.

**>= versus >.** Fast@p here counts ``s >= p``, as the Dr. Kernel code does. KernelBench's
``fast_p`` counts ``s > p`` (strictly faster); pass ``strict=True`` for that. They differ only for
speedups exactly equal to p (speedups are rounded, so this happens).

Thresholds are compared at the speedup tensor's own precision, so a float32 speedup of 1.2 counts
as ``>= 1.2`` (in float64, float32(1.2) = 1.2000000477 and float32(1.3) = 1.2999999523 would not
compare as written). Thresholds print with ``:g``: ``fast@1``, ``fast@1.2``, ``fast@3``. A metric
with an empty denominator is ``nan``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch

__all__ = ["FAST_THRESHOLDS", "kernel_metrics", "pass_at_k"]

FAST_THRESHOLDS: tuple[float, ...] = (1.0, 1.2, 1.5, 2.0, 3.0)
"""Default Fast@p thresholds: the ones Dr. Kernel's metrics report (Fast@p counts a sample as fast
iff it is correct and its speedup is >= p)."""


def _ratio(num: torch.Tensor, den: torch.Tensor) -> list[float]:
    return [float(a) / float(b) if b > 0 else math.nan for a, b in zip(num.tolist(), den.tolist())]


def _group_metrics(
    passed: torch.Tensor,
    speed: torch.Tensor,
    present: torch.Tensor,
    thresholds: Sequence[float],
    strict: bool,
) -> dict[str, list[float]]:
    """Column-wise metrics. passed, present: (N, T) bool; speed: (N, T) float, -inf if not passing."""
    n = present.sum(dim=0)
    n_pass = passed.sum(dim=0)
    out: dict[str, list[float]] = {
        "num_samples": [float(v) for v in n.tolist()],
        "correctness_rate": _ratio(n_pass, n),
    }
    for p in thresholds:
        p_t = torch.tensor(p, dtype=speed.dtype)  # compare at the input's precision: fp32 1.2 >= 1.2
        fast = passed & ((speed > p_t) if strict else (speed >= p_t))  # pass and s >= p (or s > p)
        out[f"fast@{p:g}"] = _ratio(fast.sum(dim=0), n_pass)
        out[f"fast@{p:g}_in_all"] = _ratio(fast.sum(dim=0), n)
    usable = passed & torch.isfinite(speed) & (speed > 0)
    speed = speed.double()
    log_s = torch.where(usable, torch.log(speed.clamp(min=1e-300)), torch.zeros_like(speed))
    mean_log = _ratio(log_s.sum(dim=0), usable.sum(dim=0))
    # geomean = exp(mean log s)
    out["geomean_speedup"] = [math.exp(v) if not math.isnan(v) else math.nan for v in mean_log]
    return out


def kernel_metrics(
    correct: torch.Tensor,
    speedup: torch.Tensor,
    hacked: torch.Tensor | None = None,
    turn_mask: torch.Tensor | None = None,
    *,
    thresholds: Sequence[float] = FAST_THRESHOLDS,
    strict: bool = False,
    prefix: str = "kernel",
) -> dict[str, float]:
    """Per-turn and best-by-turn kernel metrics (module doc for the definitions).

    Args:
        correct: (N, T) bool, the turn's kernel is correct (compiled and matches the reference).
        speedup: (N, T) float, reference time / kernel time; NaN where not measured.
        hacked: (N, T) bool, a hacking check fired; None = never. Hacked counts as incorrect.
        turn_mask: (N, T) bool, True where the turn exists; None = all exist.
        thresholds: the p of Fast@p.
        strict: False counts ``s >= p`` (Dr. Kernel); True counts ``s > p`` (KernelBench fast_p).
        prefix: key prefix.

    Returns:
        Flat dict of floats, e.g. ``kernel/turn_1/fast@1.2_in_all``,
        ``kernel/best_by_turn_2/correctness_rate``, ``kernel/turn_1/geomean_speedup``,
        ``kernel/turn_1/hack_rate``, ``kernel/hack_rate``.

    Example:
        one sample, turns passing with s = [1.2, 0.9]: turn_1/fast@1.2_in_all = 1 (1.2 >= 1.2;
        0 with strict=True), turn_2/fast@1.2_in_all = 0, best_by_turn_2/fast@1.2_in_all = 1.
    """
    correct_b = torch.as_tensor(correct).bool()
    if correct_b.dim() != 2:
        raise ValueError(f"correct must be (N, T), got shape {tuple(correct_b.shape)}")
    shape = correct_b.shape
    # Tensors and arrays keep their precision; Python lists become float64 (torch.as_tensor would
    # make them float32, and float32(1.2) = 1.2000000477 would leak into geomean_speedup).
    if isinstance(speedup, torch.Tensor) or hasattr(speedup, "__array__"):
        s = torch.as_tensor(speedup)
    else:
        s = torch.as_tensor(speedup, dtype=torch.float64)
    if not s.is_floating_point():
        s = s.double()
    dev = correct_b.device
    no, yes = torch.zeros(shape, dtype=torch.bool, device=dev), torch.ones(shape, dtype=torch.bool, device=dev)
    hacked_b = no if hacked is None else torch.as_tensor(hacked).bool()
    exists = yes if turn_mask is None else torch.as_tensor(turn_mask).bool()
    if s.shape != shape or hacked_b.shape != shape or exists.shape != shape:
        raise ValueError("correct, speedup, hacked and turn_mask must share one (N, T) shape")

    passed = correct_b & ~hacked_b & exists  # hacked counts as incorrect
    speed = torch.where(passed, torch.nan_to_num(s, nan=-math.inf), torch.full_like(s, -math.inf))

    out: dict[str, float] = {}
    per_turn = _group_metrics(passed, speed, exists, thresholds, strict)
    per_turn["hack_rate"] = _ratio((hacked_b & exists).sum(dim=0), exists.sum(dim=0))

    # best-by-turn t: cumulative over turns <= t
    best_speed = torch.cummax(speed, dim=1).values
    best_pass = torch.cummax(passed.to(torch.uint8), dim=1).values.bool()
    best_present = torch.cummax(exists.to(torch.uint8), dim=1).values.bool()
    best = _group_metrics(best_pass, best_speed, best_present, thresholds, strict)

    for scope, values in (("turn", per_turn), ("best_by_turn", best)):
        for name, column in values.items():
            for t, v in enumerate(column, start=1):
                out[f"{prefix}/{scope}_{t}/{name}"] = v
    n_exist = int(exists.sum())
    out[f"{prefix}/hack_rate"] = float((hacked_b & exists).sum()) / n_exist if n_exist else math.nan
    return out


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k from n samples of which c are correct: ``1 - C(n - c, k) / C(n, k)``.

    Args:
        n: samples drawn for the problem.
        c: correct samples among them, 0 <= c <= n.
        k: budget, 1 <= k <= n.

    Returns:
        The probability that at least one of k samples drawn without replacement is correct; 1.0
        when ``n - c < k``.

    Example: n = 4, c = 1, k = 2 -> 1 - C(3, 2)/C(4, 2) = 1 - 3/6 = 0.5.
    """
    if not 0 <= c <= n:
        raise ValueError(f"need 0 <= c <= n, got n={n}, c={c}")
    if not 1 <= k <= n:
        raise ValueError(f"need 1 <= k <= n, got n={n}, k={k}")
    if n - c < k:
        return 1.0
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)
