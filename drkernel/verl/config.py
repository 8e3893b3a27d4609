"""The ``drkernel:`` config node (drkernel/config/drkernel_trainer.yaml) as plain dataclasses.

verl's own nodes (``algorithm``, ``actor_rollout_ref``, ...) are converted to verl dataclasses and
reject unknown keys, so every drkernel setting lives in one top-level ``drkernel:`` node of flat
groups. :func:`step_config` and :func:`episode_settings` turn it into the objects the shared code
takes (:class:`drkernel.step.DrKernelStepConfig`, the agent's episode settings); nothing else reads
the node. Importing this module needs no verl.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["DEFAULTS", "drkernel_node", "step_config", "reward_config", "grader_settings"]

DEFAULTS: dict[str, Any] = {
    "agent": {"max_turns": 3, "prompt_template": "triton_kernelbench", "max_tokens_per_turn": 8192,
              "max_feedback_chars": 2000, "no_code_reward": 0.0, "seed": 0, "solution_mix": 0, "solution_suite": None},
    "grader": {"kind": "local", "device": "cuda", "capacity": None, "url": None, "num_actors": None,
               "options": {}},
    "reward": {"name": "speedup", "correct_weight": 0.5, "performance_weight": 0.5, "speedup_upper": 3.0,
               "speedup_lower": 0.0, "coverage_enable": True, "coverage_weight": 0.5, "penalty": 0.0},
    "mask_void_turn": True,
    "mrs": {"rs": "geometric", "rs_lower": 0.999, "rs_upper": 1.001, "token_veto": 1e-4,
            "is_level": None, "is_upper": 2.0},
    "prs": {"enable": True, "mode": "turn", "threshold": 0.3, "factor": 0.1, "speedup_threshold": None},
    "group_filter": {"enable": True, "std_threshold": 1e-3, "min_group_size": None},
    "seed": 1,
}
"""The defaults, mirrored by the YAML; a test checks that both agree."""


def _plain(node: Any) -> Any:
    """OmegaConf node or mapping -> plain Python containers (no OmegaConf import when not needed)."""
    if node is None:
        return None
    if hasattr(node, "_content") or type(node).__module__.startswith("omegaconf"):
        from omegaconf import OmegaConf

        return OmegaConf.to_container(node, resolve=True)
    if isinstance(node, Mapping):
        return {k: _plain(v) for k, v in node.items()}
    return node


def _merge(base: dict[str, Any], over: Mapping[str, Any] | None) -> dict[str, Any]:
    out = dict(base)
    for key, value in (over or {}).items():
        if isinstance(out.get(key), dict) and isinstance(value, Mapping):
            out[key] = _merge(out[key], value)
        else:
            out[key] = value
    return out


def drkernel_node(config: Any) -> dict[str, Any]:
    """The ``drkernel`` node of a full trainer config (or the node itself), over :data:`DEFAULTS`."""
    plain = _plain(config) or {}
    node = plain.get("drkernel", plain) if isinstance(plain, Mapping) else {}
    unknown = set(node) - set(DEFAULTS)
    if unknown:
        raise ValueError(f"unknown keys in the drkernel config node: {sorted(unknown)}; known: {sorted(DEFAULTS)}")
    return _merge(DEFAULTS, node)


def reward_config(node: Mapping[str, Any]):
    """``drkernel.reward`` -> :class:`drkernel.rewards.RewardConfig` (PR is its coverage term)."""
    from drkernel.rewards import RewardConfig

    return RewardConfig(**dict(node["reward"]))


def grader_settings(node: Mapping[str, Any]) -> dict[str, Any]:
    return dict(node["grader"])


def step_config(config: Any, *, estimator: str = "trloo", gamma: float = 1.0, samples_per_prompt: int | None = None,
                target_num_groups: int | None = None):
    """The :class:`drkernel.step.DrKernelStepConfig` a verl run applies.

    ``estimator`` and ``gamma`` come from verl's ``algorithm.adv_estimator`` / ``algorithm.gamma``;
    ``samples_per_prompt`` from ``actor_rollout_ref.rollout.n``. ``target_num_groups`` is None in
    verl: its replay buffer already waits until ``data.train_batch_size`` groups pass the same
    filter (drkernel.verl.trainer), so the step never has to skip.
    """
    from drkernel.correction.mismatch import MismatchConfig
    from drkernel.rewards.prs import PRSConfig
    from drkernel.step import DrKernelStepConfig

    node = drkernel_node(config)
    mrs = dict(node["mrs"])
    prs = dict(node["prs"])
    prs_enabled = prs.pop("enable")
    gf = node["group_filter"]
    return DrKernelStepConfig(
        estimator=estimator,
        gamma=float(gamma),
        mask_void_turn=bool(node["mask_void_turn"]),
        mismatch=MismatchConfig(**mrs) if (mrs.get("rs") or mrs.get("token_veto") or mrs.get("is_level")) else None,
        prs=PRSConfig(**prs) if prs_enabled else None,
        group_filter=bool(gf["enable"]),
        filter_std_threshold=float(gf["std_threshold"]),
        target_num_groups=target_num_groups,
        samples_per_prompt=samples_per_prompt,
        min_group_size=gf["min_group_size"],
    )
