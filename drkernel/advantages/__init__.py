"""Advantage estimators for multi-turn RL: TRLOO (Dr. Kernel), multi-turn GRPO, RLOO.

Pick one by name; all share one signature (see :mod:`drkernel.advantages.registry`)::

    from drkernel.advantages import get_advantage
    A = get_advantage("trloo")(turn_rewards, group_ids, turn_mask, gamma=1.0)

Token-level adapters live in :mod:`drkernel.advantages.token_level` and
:mod:`drkernel.advantages.hierarchical`. Everything here needs torch and numpy only.
"""

from drkernel.advantages.registry import get_advantage, list_advantages, register_advantage

# Importing the estimator modules registers "trloo", "grpo" and "rloo".
from drkernel.advantages import grpo as _grpo  # noqa: E402,F401
from drkernel.advantages import rloo as _rloo  # noqa: E402,F401
from drkernel.advantages import trloo as _trloo  # noqa: E402,F401

__all__ = ["get_advantage", "list_advantages", "register_advantage"]
