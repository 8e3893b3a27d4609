"""The settings groups that both trainers share, with one source of defaults.

Where defaults live. Every *leaf* setting is declared once, by the dataclass of the code that
consumes it, next to that code:

==========================================  ==================================================
:class:`drkernel.correction.MismatchConfig`  MRS: rejection mode and bounds, token veto, TIS
:class:`drkernel.rewards.PRSConfig`           PRS: coverage threshold, ramp, mode
:class:`drkernel.step.DrKernelStepConfig`     the step: estimator, gamma, void-turn mask, filter
:class:`drkernel.losses.PolicyLossConfig`     the policy loss: clips, aggregation, scale
:class:`drkernel.rewards.RewardConfig`        the turn reward: function name + its knobs
:class:`drkernel.agent.episode.EpisodeConfig` the episode: turns, feedback cap, no-code reward
==========================================  ==================================================

This module only *groups* them into the shapes a run is configured in, and takes every default
it needs from those dataclasses (``_default``); it declares no number of its own except the few
that no consumer owns (a turn's token cap, the grader's kind and device, the verl node's seeds).
Keeping the groups here, not in each consumer, keeps the consumers free of each other (the step
does not import the agent) and lets one pure-Python module (no verl, omegaconf or GPU; torch on
the CPU only, through the consumers) describe a whole run. Derived from these groups:

- :class:`drkernel.local.trainer.TrainConfig` nests :class:`StepSettings` (``.step``),
  :class:`~drkernel.losses.PolicyLossConfig` (``.loss``), :class:`~drkernel.rewards.RewardConfig`
  (``.reward``), :class:`GraderSettings` (``.grader``) and :class:`AgentSettings` (``.agent``);
  its flat ``drkernel train`` flags come from :mod:`drkernel.config.flags`;
- the verl plugin's ``drkernel:`` node is :class:`DrKernelNode`; ``drkernel.verl.config.DEFAULTS``
  is generated from it, and ``drkernel/config/drkernel_trainer.yaml`` is checked against it
  (:mod:`drkernel.config.check`, ``python -m drkernel.config.check``).

Both trainers build their :class:`~drkernel.step.DrKernelStepConfig` through
:meth:`StepSettings.step_config`, so MRS and PRS reach the step the same way from either.
"""

from __future__ import annotations

import dataclasses
import typing
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from drkernel.agent.episode import EpisodeConfig
from drkernel.correction.mismatch import MismatchConfig
from drkernel.rewards.functions import RewardConfig
from drkernel.rewards.prs import PRSConfig
from drkernel.step import DrKernelStepConfig

__all__ = [
    "AgentNode",
    "AgentSettings",
    "DrKernelNode",
    "GraderNode",
    "GraderSettings",
    "GroupFilterSettings",
    "MRSSettings",
    "PRSSettings",
    "StepSettings",
    "from_plain",
    "to_plain",
]


def _default(cls: type, name: str) -> Any:
    """The default of field ``name`` of dataclass ``cls`` (a fresh one for a default_factory)."""
    f = {f.name: f for f in dataclasses.fields(cls)}[name]
    if f.default is not dataclasses.MISSING:
        return f.default
    if f.default_factory is not dataclasses.MISSING:  # type: ignore[misc]
        return f.default_factory()  # type: ignore[misc]
    raise TypeError(f"{cls.__name__}.{name} has no default")


def _from(cls: type, name: str) -> Any:
    """``field(default_factory=...)`` giving ``cls``'s default of ``name`` (mutable or not)."""
    return field(default_factory=lambda: _default(cls, name))


# --------------------------------------------------------------------------- the step


@dataclass
class MRSSettings(MismatchConfig):
    """Mismatch rejection sampling (MRS): the fields of
    :class:`~drkernel.correction.MismatchConfig` (and its defaults) plus an on/off switch."""

    enable: bool = True
    """MRS on (the recipe: geometric [0.999, 1.001] + token veto 1e-4); off = no correction at all."""

    def config(self) -> MismatchConfig | None:
        """The step's ``mismatch`` setting: None when off or when every part of it is off."""
        if not self.enable or not (self.rs or self.token_veto or self.is_level):
            return None
        return MismatchConfig(**{f.name: getattr(self, f.name) for f in dataclasses.fields(MismatchConfig)})


@dataclass
class PRSSettings(PRSConfig):
    """Profiling-based rejection sampling (PRS): the fields of :class:`~drkernel.rewards.PRSConfig`
    (and its defaults) plus an on/off switch."""

    enable: bool = True
    """PRS on; it needs coverage (a kernel suite graded with profiling)."""

    def config(self) -> PRSConfig | None:
        """The step's ``prs`` setting: None when off."""
        if not self.enable:
            return None
        return PRSConfig(**{f.name: getattr(self, f.name) for f in dataclasses.fields(PRSConfig)})


@dataclass
class GroupFilterSettings:
    """The zero-variance group filter of the step (last-turn rewards)."""

    enable: bool = _default(DrKernelStepConfig, "group_filter")
    """Drop prompt groups whose last-turn rewards have an unbiased std below ``std_threshold``."""
    std_threshold: float = _default(DrKernelStepConfig, "filter_std_threshold")
    """Std below which a group is dropped."""
    min_group_size: int | None = _default(DrKernelStepConfig, "min_group_size")
    """Fewest trajectories a group needs; None = n // 2 + 1."""


@dataclass
class StepSettings:
    """What a run chooses of :func:`drkernel.step.dr_kernel_step` (both trainers)."""

    estimator: str = _default(DrKernelStepConfig, "estimator")
    """Advantage estimator by registry name (trloo, grpo, rloo, ...). verl: ``algorithm.adv_estimator``."""
    gamma: float = _default(DrKernelStepConfig, "gamma")
    """Discount across turns. verl: ``algorithm.gamma``."""
    mask_void_turn: bool = _default(DrKernelStepConfig, "mask_void_turn")
    """Meaningful-turn mask: a failing turn after a success is not trained on."""
    mrs: MRSSettings = field(default_factory=MRSSettings)
    """Mismatch rejection sampling."""
    prs: PRSSettings = field(default_factory=PRSSettings)
    """Profiling-based rejection sampling."""
    group_filter: GroupFilterSettings = field(default_factory=GroupFilterSettings)
    """Zero-variance group filter."""

    def __post_init__(self) -> None:
        from drkernel.advantages import get_advantage

        get_advantage(self.estimator)  # unknown: raises with the known names
        if not 0.0 <= self.gamma <= 1.0:
            raise ValueError(f"gamma must be in [0, 1], got {self.gamma}")

    def step_config(self, *, samples_per_prompt: int | None, target_num_groups: int | None,
                    prs_active: bool = True) -> DrKernelStepConfig:
        """The :class:`~drkernel.step.DrKernelStepConfig` these settings give.

        ``samples_per_prompt`` (n) and ``target_num_groups`` belong to the trainer's batch;
        ``prs_active=False`` turns PRS off whatever ``prs.enable`` says (no coverage to read)."""
        return DrKernelStepConfig(
            estimator=self.estimator,
            gamma=float(self.gamma),
            mask_void_turn=bool(self.mask_void_turn),
            mismatch=self.mrs.config(),
            prs=self.prs.config() if prs_active else None,
            group_filter=bool(self.group_filter.enable),
            filter_std_threshold=float(self.group_filter.std_threshold),
            target_num_groups=target_num_groups,
            samples_per_prompt=samples_per_prompt,
            min_group_size=self.group_filter.min_group_size,
        )


# --------------------------------------------------------------------------- grader and agent


@dataclass
class GraderSettings:
    """How turns are graded (both trainers)."""

    capacity: int | None = None
    """Concurrent evaluations; None = the grader's default (one per visible GPU, or per CPU core)."""
    profile: bool | None = None
    """Attribute the graded calls' work (coverage: PR/PRS input and the grader's coverage verdict);
    None = on (on the CPU interpreter coverage is the cheap torch-work estimate, drkernel.env.measure.profiling)."""
    options: dict[str, Any] = field(default_factory=dict)
    """EvalConfig overrides for every evaluation (e.g. ``{"timing_trials": 3}``)."""

    def eval_overrides(self) -> dict[str, Any]:
        """``options`` with ``profile`` when set (``options`` wins)."""
        base = {} if self.profile is None else {"profile": bool(self.profile)}
        return {**base, **dict(self.options)}


@dataclass
class GraderNode(GraderSettings):
    """verl's grader: where it runs (the local trainer grades in its own process on ``--device``)."""

    kind: str = "local"
    """local (this node's GPUs/CPUs), ray (a pool of grader actors) or http (drkernel's grading service)."""
    device: str = "cuda"
    """Where local/ray graders run candidates: cuda or cpu (the Triton interpreter)."""
    url: str | None = None
    """http: the service's base URL."""
    num_actors: int | None = None
    """ray: number of grader actors (None = one per GPU in the cluster)."""
    spares: int | None = None
    """local/node/ray: warm candidate processes kept started per GPU (None = LocalGrader's default: twice
    its per-GPU concurrency, at most 16). Each serves one candidate; a grading burst larger than the
    spares waits for fresh starts, which take ~5 s on an idle H200 and ~20 s beside a 4-GPU verl run."""


@dataclass
class AgentSettings:
    """The multi-turn episode (both trainers)."""

    max_turns: int = _default(EpisodeConfig, "max_turns")
    """Turns per episode; the loop does not stop early on success (as in the paper)."""
    max_tokens_per_turn: int = 8192
    """Cap on one reply (tokens)."""
    max_feedback_chars: int = _default(EpisodeConfig, "max_feedback_chars")
    """Feedback text cap (head and tail kept), so one traceback cannot eat the context."""
    no_code_reward: float = _default(EpisodeConfig, "no_code_reward")
    """Reward of a reply with no code block."""
    solution_mix: int = 0
    """TESTING ONLY (smoke/timing runs with an untrained model; keep 0 for training): every k-th
    sample answers with the task's bundled solution, so grading, PR and PRS see real kernels; 0 = off."""


@dataclass
class AgentNode(AgentSettings):
    """verl's agent settings: the dataset rows carry no suite, so the template and the solutions'
    folder are named here (the local trainer takes both from its ``--suite``)."""

    prompt_template: str = _default(EpisodeConfig, "prompt_template")
    """drkernel.agent.prompts template of the feedback messages."""
    seed: int = 0
    """Base of the per-turn grading seeds."""
    solution_suite: str | None = None
    """Suite directory holding the bundled solutions (solutions/*.py) for solution_mix."""


# --------------------------------------------------------------------------- the verl node


_STEP = StepSettings()


@dataclass
class DrKernelNode:
    """The ``drkernel:`` node of ``drkernel/config/drkernel_trainer.yaml`` (verl). Its step part
    is :class:`StepSettings` without estimator and gamma (verl's ``algorithm`` node has those)."""

    agent: AgentNode = field(default_factory=AgentNode)
    grader: GraderNode = field(default_factory=GraderNode)
    reward: RewardConfig = field(default_factory=RewardConfig)
    mask_void_turn: bool = _STEP.mask_void_turn
    mrs: MRSSettings = _from(StepSettings, "mrs")
    prs: PRSSettings = _from(StepSettings, "prs")
    group_filter: GroupFilterSettings = _from(StepSettings, "group_filter")
    seed: int = 1
    """Seed of PRS draws."""

    def step_settings(self, *, estimator: str = _STEP.estimator, gamma: float = _STEP.gamma) -> StepSettings:
        return StepSettings(estimator=estimator, gamma=gamma, mask_void_turn=self.mask_void_turn, mrs=self.mrs,
                            prs=self.prs, group_filter=self.group_filter)


# --------------------------------------------------------------------------- plain <-> dataclass


def to_plain(obj: Any) -> Any:
    """Dataclass -> plain dicts/lists (JSON/YAML-ready). A :class:`RewardConfig` becomes its node
    view: the function's name and that function's knobs only (``RewardConfig.node()``)."""
    if isinstance(obj, RewardConfig):
        return to_plain(obj.node())
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {f.name: to_plain(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    if isinstance(obj, Mapping):
        return {k: to_plain(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [to_plain(v) for v in obj]
    return obj


def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def _as_tuple(value: Any) -> Any:
    if isinstance(value, (list, tuple)):
        return tuple(_as_tuple(v) for v in value)
    return value


def _convert(hint: Any, value: Any, path: str, base: Any) -> Any:
    if isinstance(hint, type) and dataclasses.is_dataclass(hint):
        if isinstance(value, hint):
            return value
        if not isinstance(value, Mapping):
            raise ValueError(f"{path} must be a mapping of {hint.__name__} fields, got {value!r}")
        return from_plain(hint, value, path=path, base=base if isinstance(base, hint) else None)
    origin = typing.get_origin(hint)
    if origin is tuple and isinstance(value, (list, tuple)):
        return _as_tuple(value)
    if origin is dict and isinstance(value, Mapping):
        return dict(value)
    return value


def _field_base(cls: type, base: Any, name: str) -> Any:
    if base is not None:
        return getattr(base, name)
    try:
        return _default(cls, name)
    except TypeError:
        return None


def from_plain(cls: type, data: Mapping[str, Any] | None, *, path: str = "", base: Any = None) -> Any:
    """Build dataclass ``cls`` from a (partial) plain mapping: missing keys keep their defaults
    (those of ``base`` when given), nested groups are merged field by field over their own
    defaults, and an unknown key raises a ValueError naming its dotted path and the known keys."""
    data = dict(data or {})
    names = [f.name for f in dataclasses.fields(cls) if f.init]
    unknown = sorted(set(data) - set(names))
    if unknown:
        where = f" in {path}" if path else ""
        raise ValueError(f"unknown keys{where}: {unknown}; known: {sorted(names)}")
    hints = _hints(cls)
    kwargs = {k: _convert(hints.get(k), v, f"{path}.{k}" if path else k, _field_base(cls, base, k))
              for k, v in data.items()}
    return dataclasses.replace(base, **kwargs) if base is not None else cls(**kwargs)
