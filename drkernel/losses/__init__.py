"""Policy losses for the actor update: dual-clip PPO with asymmetric bounds and
the loss aggregation modes. Pure functions of tensors; torch only."""

from . import policy
from .policy import *  # noqa: F401,F403 - the public names are policy's own __all__

__all__ = list(policy.__all__)
