"""Policy losses for the actor update (reference §2.5): dual-clip PPO with asymmetric bounds and
the loss aggregation modes. Pure functions of tensors; torch only."""

from .policy import (
    AGG_MODES,
    PolicyLossConfig,
    agg_loss,
    approx_kl,
    entropy_from_logits,
    minibatch_denominators,
    policy_loss,
    ppo_clip_token_loss,
)

__all__ = [
    "AGG_MODES",
    "PolicyLossConfig",
    "agg_loss",
    "approx_kl",
    "entropy_from_logits",
    "minibatch_denominators",
    "policy_loss",
    "ppo_clip_token_loss",
]
