"""Profiling-based rejection sampling (PRS): drop correct turns whose kernels do little of the work.

"Lazy optimisation" puts a trivial sub-op (a ReLU, a bias add) into Triton and leaves the heavy ops
to PyTorch; the kernel is correct and maybe faster, but its Triton coverage ``cov`` (share of
device time spent in the candidate's own Triton kernels) is small. PRS removes such turns from the
loss stochastically:

    x_{i,t} = aggregated coverage (see modes)
    p_{i,t} = clamp((x_{i,t} - theta) / f, 0, 1)      (f = 0 or None: p = 1[x >= theta])
    p_{i,t} = 1                                         if turn (i, t) is not correct
    p_{i,t} = max(p_{i,t}, 1[s_{i,t} >= s*])            if a speedup threshold s* >= 0 is set
    keep_{i,t} ~ Bernoulli(p_{i,t})

Modes:

- ``turn`` (the recipe): ``x_{i,t} = cov_{i,t}``.
- ``geometric``: ``x_i = exp(mean over the trajectory's valid turns of log max(cov, 1e-8))``,
  broadcast to all its turns, as in the reference. Incorrect turns (coverage 0 -> 1e-8) enter the
  mean, so one failed turn rejects every correct turn of the trajectory (reference bug §9.16).
- ``geometric_correct``: the same mean over the trajectory's valid *correct* turns only, which
  avoids that bug.

Recipe (theta 0.3, f 0.1, turn mode): a correct turn with coverage <= 0.30 is always dropped,
>= 0.40 always kept, 0.35 kept with probability 0.5. Missing (NaN) coverage counts as 0. Rejected
turns still count in the TRLOO baselines of their peers (as in Dr. Kernel); the caller multiplies
the row's response mask by ``keep``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

__all__ = ["PRS_MODES", "PRSConfig", "prs_keep_mask"]

PRS_MODES = ("turn", "geometric", "geometric_correct")
"""Accepted ``mode`` values."""

_MIN_COVERAGE = 1e-8
_LOG_BOUND = 20.0


@dataclass
class PRSConfig:
    """PRS settings; defaults are the Dr. Kernel recipe (turn mode, threshold 0.3, factor 0.1, no
    speedup override). The field names are
    ``prs_keep_mask``'s keyword arguments: ``prs_keep_mask(..., **dataclasses.asdict(cfg))``."""

    threshold: float = 0.3
    """theta: coverage at which the keep probability starts to rise above 0."""
    factor: float | None = 0.1
    """f: width of the linear ramp from p = 0 (x = theta) to p = 1 (x = theta + f); 0/None = hard cut."""
    mode: str = "turn"
    """Coverage aggregation: ``turn``, ``geometric`` or ``geometric_correct``."""
    speedup_threshold: float | None = None
    """s*: a correct turn with speedup >= s* is always kept; None or negative = off (recipe)."""

    def __post_init__(self) -> None:
        if self.mode not in PRS_MODES:
            raise ValueError(f"unknown PRS mode {self.mode!r}; known: {', '.join(PRS_MODES)}")


def _ramp(x: torch.Tensor, threshold: float, factor: float) -> torch.Tensor:
    """``p = clamp((x - theta) / f, 0, 1)`` with exact end points.

    Computed naively, ``(0.4 - 0.3) / 0.1`` is 0.9999999999999998 in float64 (and just under 1 in
    float32 too): a coverage at the top of the ramp got ``p < 1`` and then demanded a generator,
    although the contract keeps it surely. Here ``x <= theta`` gives exactly 0 and
    ``x >= theta + f`` gives exactly 1, both compared at ``x``'s precision and up to a few ulps
    (so ``theta + f`` rounding, e.g. 0.2 + 0.1 = 0.30000000000000004, does not matter).
    """
    eps = torch.finfo(x.dtype).eps
    lo = torch.tensor(threshold, dtype=x.dtype, device=x.device)
    hi = torch.tensor(threshold + factor, dtype=x.dtype, device=x.device)
    scale = max(1.0, abs(threshold) + abs(factor))
    at_top = (x >= hi) | ((x - hi).abs() <= 4 * eps * scale)
    at_bottom = (x <= lo) | ((x - lo).abs() <= 4 * eps * scale)
    p = ((x.double() - threshold) / factor).clamp(0.0, 1.0)  # interior of the ramp
    p = torch.where(at_top, torch.ones_like(p), p)
    return torch.where(at_bottom & ~at_top, torch.zeros_like(p), p)


def prs_keep_mask(
    coverage: torch.Tensor,
    correct: torch.Tensor,
    turn_mask: torch.Tensor | None = None,
    speedup: torch.Tensor | None = None,
    *,
    threshold: float = 0.3,
    factor: float | None = 0.1,
    mode: str = "turn",
    speedup_threshold: float | None = None,
    generator: torch.Generator | None = None,
) -> tuple[torch.Tensor, dict[str, float]]:
    """Stochastic coverage rejection of correct turns (module doc for the formulas).

    Args:
        coverage: (N, T) Triton coverage ``cov`` in [0, 1] of turn t of trajectory i; NaN = none.
        correct: (N, T) bool, the turn's kernel passed (compiled, correct, not hacked).
        turn_mask: (N, T) bool, True where the turn exists and still has valid tokens (after
            MRS); None = all. Only these turns enter the geometric mean and the metrics.
        speedup: (N, T) speedups, needed only with ``speedup_threshold``; NaN counts as no speedup.
        threshold: theta.
        factor: f; 0 or None gives the hard cut ``p = 1[x >= theta]``.
        mode: ``turn``, ``geometric`` or ``geometric_correct``.
        speedup_threshold: s*; None or negative = off.
        generator: source of the Bernoulli draws. Required whenever some ``p`` is strictly between
            0 and 1; when given, exactly N*T uniforms are drawn on every call, on the generator's
            device (a CPU generator works for data on any device and draws the same keeps).

    Returns:
        ``(keep, metrics)``: (N, T) bool, True where the turn is valid and kept (already-invalid
        turns come back False, so ``keep`` can serve as the new turn mask), and

        - ``prs/masked_frac``: rejected / valid turns;
        - ``prs/correct_masked_frac``: rejected / valid correct turns;
        - ``prs/traj_masked_frac``: trajectories with a rejected turn / trajectories with a valid turn;
        - ``prs/keep_prob_mean``: mean p over valid correct turns;
        - ``prs/coverage_mean|min|max``: raw coverage over valid correct turns.

        A metric with an empty denominator is ``nan``.
    """
    if mode not in PRS_MODES:
        raise ValueError(f"unknown PRS mode {mode!r}; known: {', '.join(PRS_MODES)}")
    if coverage.dim() != 2:
        raise ValueError(f"coverage must be (N, T), got shape {tuple(coverage.shape)}")
    shape = coverage.shape
    # Work in the input's precision so that float32 coverage 0.3 meets theta = 0.3 exactly.
    cov = coverage.detach() if coverage.is_floating_point() else coverage.detach().double()
    cov = torch.nan_to_num(cov, nan=0.0)
    ok = correct.bool()
    valid = torch.ones(shape, dtype=torch.bool, device=cov.device) if turn_mask is None else turn_mask.bool()
    if ok.shape != shape or valid.shape != shape:
        raise ValueError("coverage, correct and turn_mask must share one (N, T) shape")

    # x: aggregated coverage
    if mode == "turn":
        x = cov
    else:
        members = valid if mode == "geometric" else valid & ok
        log_cov = torch.log(cov.clamp(min=_MIN_COVERAGE))
        count = members.sum(dim=1, keepdim=True)
        mean_log = torch.where(members, log_cov, torch.zeros_like(log_cov)).sum(dim=1, keepdim=True)
        mean_log = mean_log / count.clamp(min=1)
        x = torch.exp(mean_log.clamp(-_LOG_BOUND, _LOG_BOUND)).expand(shape)  # exp(mean log cov)

    # p = clamp((x - theta) / f, 0, 1), or the hard cut 1[x >= theta]
    if factor:
        p = _ramp(x, threshold, factor)
    else:
        p = (x >= threshold).to(x.dtype)
    p = p.double()
    p = torch.where(ok, p, torch.ones_like(p))  # incorrect turns always keep
    if speedup_threshold is not None and speedup_threshold >= 0:
        if speedup is None:
            raise ValueError("speedup_threshold needs speedup")
        s = speedup.detach() if speedup.is_floating_point() else speedup.detach().double()
        fast = torch.nan_to_num(s, nan=-math.inf) >= speedup_threshold
        p = torch.where(fast, torch.ones_like(p), p)  # p = max(p, 1[s >= s*])

    if generator is not None:
        # Draw on the generator's own device, then move: a CPU generator serves data on any device
        # (torch.rand refuses a CPU generator with device='cuda'), and the draws do not depend on it.
        u = torch.rand(shape, generator=generator, dtype=torch.float64, device=generator.device).to(cov.device)
        keep = u < p  # Bernoulli(p): p = 0 never, p = 1 always (u in [0, 1))
    elif bool(((p > 0) & (p < 1) & valid).any()):
        raise ValueError("PRS keep probabilities strictly between 0 and 1 need a torch.Generator")
    else:
        keep = p >= 1.0
    keep = keep & valid

    rejected = valid & ~keep
    correct_valid = valid & ok

    def frac(num: torch.Tensor, den: torch.Tensor) -> float:
        d = int(den.sum())
        return float(num.sum()) / d if d else math.nan

    traj_valid = valid.any(dim=1)
    cov_correct = coverage.detach().double()[correct_valid]
    cov_correct = torch.nan_to_num(cov_correct, nan=0.0)
    metrics = {
        "prs/masked_frac": frac(rejected, valid),
        "prs/correct_masked_frac": frac(rejected & ok, correct_valid),
        "prs/traj_masked_frac": frac(rejected.any(dim=1) & traj_valid, traj_valid),
        "prs/keep_prob_mean": float(p[correct_valid].mean()) if cov_correct.numel() else math.nan,
        "prs/coverage_mean": float(cov_correct.mean()) if cov_correct.numel() else math.nan,
        "prs/coverage_min": float(cov_correct.min()) if cov_correct.numel() else math.nan,
        "prs/coverage_max": float(cov_correct.max()) if cov_correct.numel() else math.nan,
    }
    return keep, metrics
