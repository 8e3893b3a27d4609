"""Turn rewards (including the profiling-based reward PR), the meaningful-turn mask, PRS and the
group filter."""

from .functions import (
    REWARD_FUNCTIONS,
    EvalOutcome,
    RewardConfig,
    compute_reward,
    compute_rewards,
    get_reward_fn,
    outcome_tensors,
    speedup_reward,
    tiered_reward,
    weighted_reward,
)
from .group_filter import GroupSelection, filter_groups, filter_groups_last_turn, last_turn_rewards
from .prs import PRS_MODES, PRSConfig, prs_keep_mask
from .turn_mask import meaningful_turn_mask

__all__ = [
    "PRS_MODES",
    "REWARD_FUNCTIONS",
    "EvalOutcome",
    "GroupSelection",
    "PRSConfig",
    "RewardConfig",
    "compute_reward",
    "compute_rewards",
    "filter_groups",
    "filter_groups_last_turn",
    "get_reward_fn",
    "last_turn_rewards",
    "meaningful_turn_mask",
    "outcome_tensors",
    "prs_keep_mask",
    "speedup_reward",
    "tiered_reward",
    "weighted_reward",
]
