"""Turn rewards from kernel evaluation results, including the profiling-based reward (PR).

Every function works on Python scalars (returns a ``float``) and on tensors / array-likes of any
broadcastable shape (returns a float64 tensor), so one call scores a whole batch of turns.
Inputs (the fields of the kernel evaluation result, design.md "Kernel evaluation result"):

- ``correct``: bool, the kernel passed the correctness check (``c`` = 1 or 0).
- ``speedup``: float ``s`` = reference time / kernel time; None or NaN = not measured (counts 0).
- ``coverage``: float ``cov`` in [0, 1], share of the candidate's device time spent in its own
  Triton kernels; None or NaN = not profiled (counts 0).
- ``hacked``: bool, a hacking check fired. A hacked turn gets ``penalty`` whatever else it has.
- ``compiled``: bool; only the tiered reward tells compile failures from wrong answers.

A kernel passes when compiled and correct and not hacked; ``c`` is that verdict, and speedup and
coverage only count for a passing kernel (KernelGYM's server reports ``s = 0`` otherwise).

Reward functions (Dr. Kernel's three; the recipe's values are the defaults):

- ``speedup_reward`` (the recipe, "calculate_reward_speedup")::

      s~ = min(s, upper);  s~ = 0 if s~ < lower
      R  = w_c * c + w_p * c * s~ + c * [enable_coverage] * W_cov * cov        (PR = the cov term)

  with w_c = w_p = 0.5, upper 3.0, lower 0.0, W_cov = 0.5: R in [0, 2.5].
- ``weighted_reward``: ``R = w_c * c + w_p * c * [s >= 1 + eps] + c * [enable_coverage] * W_cov * cov``.
- ``tiered_reward`` (Kevin-like, "like_kernel"): hacked -1, not compiled -0.5, incorrect -0.3, then
  by speedup tiers >= 3: 1.0, >= 2: 0.8, >= 1.5: 0.6, >= 1.2: 0.4, >= 1.0: 0.2, else -0.1.
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, fields
from typing import Any, Protocol, runtime_checkable

import torch

from drkernel._registry import Registry

__all__ = [
    "REWARD_FUNCTIONS",
    "EvalOutcome",
    "RewardConfig",
    "compute_reward",
    "compute_rewards",
    "get_reward_fn",
    "outcome_tensors",
    "speedup_reward",
    "tiered_reward",
    "weighted_reward",
]

Value = Any
"""A bool/float scalar, or an array-like / tensor of them."""


@runtime_checkable
class EvalOutcome(Protocol):
    """The fields of a kernel evaluation result that rewards read (design.md). A dict with these
    keys works as well."""

    compiled: bool
    correct: bool
    hacked: bool
    speedup: float | None
    coverage: float | None


# --------------------------------------------------------------------------- helpers


def _is_scalar(*values: Value) -> bool:
    return all(v is None or isinstance(v, (bool, int, float)) for v in values)


def _float(x: Value) -> torch.Tensor:
    """Floating tensor; None and NaN become 0.

    Tensors and numpy arrays keep their own floating precision (integer and bool ones become
    float64), so thresholds are compared at the input's precision: a float32 speedup of 1.2 meets
    a 1.2 threshold. Python numbers and lists of them become float64, never torch's default
    float32: ``torch.as_tensor(0.6)`` is float32(0.6) = 0.6000000238, which turned the recipe's
    1.8 into 1.800000011920929. Arithmetic then happens in float64."""
    if x is None:
        return torch.zeros((), dtype=torch.float64)
    if isinstance(x, torch.Tensor) or hasattr(x, "__array__"):
        t = torch.as_tensor(x)
    else:
        t = torch.as_tensor(x, dtype=torch.float64)  # Python scalars / sequences: exact float64
    if not t.is_floating_point():
        t = t.double()
    return torch.nan_to_num(t, nan=0.0)


def _bool(x: Value) -> torch.Tensor:
    return torch.as_tensor(x).bool()


def _out(result: torch.Tensor, scalar: bool) -> float | torch.Tensor:
    return float(result) if scalar else result.double()


def _passed(correct: Value, hacked: Value, compiled: Value) -> torch.Tensor:
    # c = compiled AND correct AND NOT hacked
    return _bool(correct) & ~_bool(hacked) & _bool(compiled)


def _coverage_and_penalty(reward: torch.Tensor, c: torch.Tensor, coverage: Value, hacked: Value,
                          enable: bool, weight: float, penalty: float) -> torch.Tensor:
    """``reward + c [enable] W_cov cov`` (PR), then ``penalty`` wherever the turn is hacked."""
    if enable:
        reward = reward + c * weight * _float(coverage).double()  # + c W_cov cov  (PR)
    return torch.where(_bool(hacked), torch.full_like(reward, penalty), reward)


# --------------------------------------------------------------------------- reward functions


def speedup_reward(
    correct: Value,
    speedup: Value,
    coverage: Value = None,
    hacked: Value = False,
    compiled: Value = True,
    *,
    correct_weight: float = 0.5,
    performance_weight: float = 0.5,
    speedup_upper: float = 3.0,
    speedup_lower: float = 0.0,
    coverage_enable: bool = True,
    coverage_weight: float = 0.5,
    penalty: float = 0.0,
) -> float | torch.Tensor:
    """The recipe's reward: correctness + clipped speedup + profiling-based reward (PR).

    ``R = w_c c + w_p c s~ + c [enable] W_cov cov``, ``s~ = min(s, upper)``, ``s~ = 0`` below
    ``lower`` (zero, not the bound); ``R = penalty`` if hacked.

    Args:
        correct, speedup, coverage, hacked, compiled: scalars or broadcastable tensors (module doc).
        correct_weight: w_c.
        performance_weight: w_p.
        speedup_upper: the speedup is clipped to this before weighting.
        speedup_lower: clipped speedups below it count 0 (0.0 disables).
        coverage_enable: add the coverage term (PR).
        coverage_weight: W_cov.
        penalty: reward of a hacked turn.

    Returns:
        float for scalar inputs, else a float64 tensor of the broadcast shape.

    Examples (recipe defaults w_c = w_p = W_cov = 0.5, upper bound 3):
        correct, s = 2.0, cov = 0.6: 0.5 + 0.5*2.0 + 0.5*0.6 = 1.8;
        correct, s = 5.0, cov = 0.2: 0.5 + 0.5*3.0 + 0.5*0.2 = 2.1;
        correct, s = 0.4, cov = 0.0: 0.5 + 0.5*0.4 = 0.7; incorrect: 0.
    """
    scalar = _is_scalar(correct, speedup, coverage, hacked, compiled)
    c = _passed(correct, hacked, compiled).double()
    s = _float(speedup).clamp(min=0.0).clamp(max=speedup_upper)  # s~ = min(s, upper)
    s = torch.where(s < speedup_lower, torch.zeros_like(s), s).double()  # s~ = 0 if s~ < lower
    reward = correct_weight * c + performance_weight * c * s  # w_c c + w_p c s~
    return _out(_coverage_and_penalty(reward, c, coverage, hacked, coverage_enable, coverage_weight, penalty), scalar)


def weighted_reward(
    correct: Value,
    speedup: Value,
    coverage: Value = None,
    hacked: Value = False,
    compiled: Value = True,
    *,
    correct_weight: float = 0.5,
    performance_weight: float = 0.5,
    speedup_eps: float = 0.01,
    coverage_enable: bool = True,
    coverage_weight: float = 0.5,
    penalty: float = 0.0,
) -> float | torch.Tensor:
    """Correctness + a "faster than the reference" bonus + PR.

    ``R = w_c c + w_p c [s >= 1 + eps] + c [enable] W_cov cov``; ``R = penalty`` if hacked.

    Example: correct, s = 1.005, cov = 0.4 -> 0.5 + 0 + 0.2 = 0.7; s = 1.01 -> 1.2.
    """
    scalar = _is_scalar(correct, speedup, coverage, hacked, compiled)
    c = _passed(correct, hacked, compiled).double()
    faster = (_float(speedup) >= 1.0 + speedup_eps).double()  # [s >= 1 + eps]
    reward = correct_weight * c + performance_weight * c * faster
    return _out(_coverage_and_penalty(reward, c, coverage, hacked, coverage_enable, coverage_weight, penalty), scalar)


DEFAULT_TIERS: tuple[tuple[float, float], ...] = ((3.0, 1.0), (2.0, 0.8), (1.5, 0.6), (1.2, 0.4), (1.0, 0.2))
"""(speedup threshold, reward) pairs of the tiered reward, highest threshold first."""


def tiered_reward(
    correct: Value,
    speedup: Value,
    coverage: Value = None,
    hacked: Value = False,
    compiled: Value = True,
    *,
    tiers: Sequence[tuple[float, float]] = DEFAULT_TIERS,
    perf_degrade: float = -0.1,
    correctness_fail: float = -0.3,
    compilation_fail: float = -0.5,
    hacked_penalty: float = -1.0,
) -> float | torch.Tensor:
    """Kevin-like tiered reward ("like_kernel" in the reference); ``coverage`` is ignored.

    hacked -> ``hacked_penalty``; not compiled -> ``compilation_fail``; incorrect ->
    ``correctness_fail``; correct -> the reward of the highest tier with ``s >= threshold``, or
    ``perf_degrade`` below every tier.

    Example: correct, s = 1.2 -> 0.4 (tier ``>= 1.2``); s = 1.19 -> 0.2; s = 0.9 -> -0.1.
    """
    del coverage
    scalar = _is_scalar(correct, speedup, hacked, compiled)
    s = _float(speedup)
    reward = torch.full(s.shape, perf_degrade, dtype=torch.float64, device=s.device)
    for threshold, value in sorted(tiers):  # ascending, so higher tiers overwrite lower ones
        reward = torch.where(s >= threshold, torch.full_like(reward, value), reward)
    hacked_t, compiled_t, correct_t = _bool(hacked), _bool(compiled), _bool(correct)
    reward = torch.where(correct_t, reward, torch.full_like(reward, correctness_fail))
    reward = torch.where(compiled_t, reward, torch.full_like(reward, compilation_fail))
    reward = torch.where(hacked_t, torch.full_like(reward, hacked_penalty), reward)
    return _out(reward, scalar)


RewardFn = Callable[..., "float | torch.Tensor"]

REWARD_FUNCTIONS: Registry[RewardFn] = Registry("reward function")
"""Reward functions by name (a read-only mapping). All share ``(correct, speedup, coverage, hacked,
compiled, **knobs)``; add one with ``REWARD_FUNCTIONS.register(name, fn)``."""
REWARD_FUNCTIONS.register("speedup", speedup_reward)
REWARD_FUNCTIONS.register("weighted", weighted_reward)
REWARD_FUNCTIONS.register("tiered", tiered_reward)


def get_reward_fn(name: str) -> RewardFn:
    """The reward function registered as ``name``; an unknown name raises (a ValueError and a
    KeyError) listing the known ones."""
    return REWARD_FUNCTIONS[name]


# --------------------------------------------------------------------------- config and results


def _knob_default(name: str) -> Any:
    """The default of keyword ``name`` in the reward functions that take it (they must agree):
    RewardConfig's defaults are the functions' own, declared once in their signatures."""
    found = {inspect.signature(fn).parameters[name].default for fn in (speedup_reward, weighted_reward, tiered_reward)
             if name in inspect.signature(fn).parameters}
    if len(found) != 1:
        raise TypeError(f"reward functions disagree on the default of {name!r}: {found}")
    return found.pop()


@dataclass
class RewardConfig:
    """Reward settings: the reward function's name plus that function's knobs. Defaults are the
    Dr. Kernel recipe (speedup reward + PR: 0.5 c + 0.5 min(s, 3) + 0.5 c cov), read from the
    functions' signatures.

    One flat constructor takes the knobs of every built-in function (``RewardConfig(name="tiered",
    perf_degrade=-0.2)``); :meth:`knobs` picks the selected function's, and :meth:`node` is the
    config-file view, ``{"name": ..., **knobs()}`` (what drkernel_trainer.yaml's ``drkernel.reward``
    holds)."""

    name: str = "speedup"
    """Reward function: ``speedup`` (recipe), ``weighted`` or ``tiered``."""
    correct_weight: float = _knob_default("correct_weight")
    """w_c, weight of correctness (speedup, weighted)."""
    performance_weight: float = _knob_default("performance_weight")
    """w_p, weight of the clipped speedup (speedup) or of the faster-than-reference bonus (weighted)."""
    speedup_upper: float = _knob_default("speedup_upper")
    """Speedups are clipped to this before weighting (speedup)."""
    speedup_lower: float = _knob_default("speedup_lower")
    """Clipped speedups below this count 0; 0.0 disables (speedup)."""
    speedup_eps: float = _knob_default("speedup_eps")
    """The bonus needs s >= 1 + eps (weighted)."""
    coverage_enable: bool = _knob_default("coverage_enable")
    """Add the profiling-based reward (PR), ``c * W_cov * cov`` (speedup, weighted)."""
    coverage_weight: float = _knob_default("coverage_weight")
    """W_cov, weight of the coverage term."""
    penalty: float = _knob_default("penalty")
    """Reward of a hacked turn (speedup, weighted)."""
    tiers: tuple[tuple[float, float], ...] = _knob_default("tiers")
    """(speedup threshold, reward) pairs for a correct kernel (tiered)."""
    perf_degrade: float = _knob_default("perf_degrade")
    """Correct but below every tier (tiered)."""
    correctness_fail: float = _knob_default("correctness_fail")
    """Compiled but incorrect (tiered)."""
    compilation_fail: float = _knob_default("compilation_fail")
    """Did not compile (tiered)."""
    hacked_penalty: float = _knob_default("hacked_penalty")
    """Hacked (tiered)."""

    def __post_init__(self) -> None:
        get_reward_fn(self.name)

    def knobs(self) -> dict[str, Any]:
        """The keyword arguments that the selected reward function accepts, from this config."""
        params = inspect.signature(get_reward_fn(self.name)).parameters
        return {f.name: getattr(self, f.name) for f in fields(self) if f.name in params}

    def node(self) -> dict[str, Any]:
        """The config-file view: the function's name and its knobs only."""
        return {"name": self.name, **self.knobs()}


def _get(result: Any, key: str, default: Any) -> Any:
    if isinstance(result, Mapping):
        return result.get(key, default)
    return getattr(result, key, default)


def outcome_tensors(results: Sequence[Any]) -> dict[str, torch.Tensor]:
    """Stack evaluation results (dicts or objects with the ``EvalOutcome`` fields) into tensors.

    Returns:
        ``compiled``, ``correct``, ``hacked``: (N,) bool; ``speedup``, ``coverage``: (N,) float64,
        NaN where the result has None. A missing ``compiled`` defaults to True, a missing
        ``hacked`` to False; ``correct`` is required.
    """
    cols: dict[str, list] = {"compiled": [], "correct": [], "hacked": [], "speedup": [], "coverage": []}
    for r in results:
        correct = _get(r, "correct", None)
        if correct is None:
            raise KeyError(f"evaluation result has no 'correct': {r!r}")
        cols["correct"].append(bool(correct))
        cols["compiled"].append(bool(_get(r, "compiled", True)))
        cols["hacked"].append(bool(_get(r, "hacked", False)))
        for key in ("speedup", "coverage"):
            value = _get(r, key, None)
            cols[key].append(math.nan if value is None else float(value))
    out = {k: torch.tensor(cols[k], dtype=torch.bool) for k in ("compiled", "correct", "hacked")}
    out.update({k: torch.tensor(cols[k], dtype=torch.float64) for k in ("speedup", "coverage")})
    return out


def compute_reward(result: Any, config: RewardConfig | None = None) -> float:
    """Reward of one evaluation result (dict or ``EvalOutcome``) under ``config``."""
    return float(compute_rewards([result], config)[0])


def compute_rewards(results: Sequence[Any], config: RewardConfig | None = None) -> torch.Tensor:
    """(N,) float64 rewards of N evaluation results under ``config`` (default: the recipe)."""
    cfg = RewardConfig() if config is None else config
    t = outcome_tensors(results)
    fn = get_reward_fn(cfg.name)
    return fn(t["correct"], t["speedup"], t["coverage"], t["hacked"], t["compiled"], **cfg.knobs())
