"""The ``drkernel:`` config node (drkernel/config/drkernel_trainer.yaml) as plain dataclasses.

verl's own nodes (``algorithm``, ``actor_rollout_ref``, ...) are converted to verl dataclasses and
reject unknown keys, so every drkernel setting lives in one top-level ``drkernel:`` node of flat
groups. The node's shape and defaults are :class:`drkernel.config.settings.DrKernelNode` (the
same settings groups the local trainer nests); :data:`DEFAULTS` is generated from it, and the
YAML is checked against it (``python -m drkernel.config.check``). :func:`step_config` and
:func:`reward_config` turn the node into the objects the shared code takes
(:class:`drkernel.step.DrKernelStepConfig` through :meth:`StepSettings.step_config`, as the local
trainer does, and :class:`drkernel.rewards.RewardConfig`); nothing else reads the node.
Importing this module needs no verl.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from drkernel.config.settings import DrKernelNode, from_plain, to_plain

__all__ = ["DEFAULTS", "drkernel_node", "node_settings", "step_config", "reward_config", "grader_settings"]

DEFAULTS: dict[str, Any] = to_plain(DrKernelNode())
"""The defaults, generated from :class:`~drkernel.config.settings.DrKernelNode`; the YAML mirrors
them and a test (``drkernel.config.check``) names any field where the two disagree."""


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


def node_settings(config: Any) -> DrKernelNode:
    """The ``drkernel`` node of a full trainer config (or the node itself) as a
    :class:`~drkernel.config.settings.DrKernelNode`: missing keys keep their defaults, an unknown
    key at any depth raises a ValueError naming it."""
    plain = _plain(config) or {}
    node = plain.get("drkernel", plain) if isinstance(plain, Mapping) else {}
    return from_plain(DrKernelNode, node, path="drkernel")


def drkernel_node(config: Any) -> dict[str, Any]:
    """The ``drkernel`` node of a full trainer config (or the node itself), over :data:`DEFAULTS`,
    as plain containers."""
    return to_plain(node_settings(config))


def reward_config(node: Mapping[str, Any]):
    """``drkernel.reward`` -> :class:`drkernel.rewards.RewardConfig` (PR is its coverage term)."""
    from drkernel.rewards import RewardConfig

    return from_plain(RewardConfig, dict(node["reward"]), path="drkernel.reward")


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
    settings = node_settings(config).step_settings(estimator=estimator, gamma=float(gamma))
    return settings.step_config(samples_per_prompt=samples_per_prompt, target_num_groups=target_num_groups)
