"""Rollout/trainer mismatch correction (MRS): rejection sampling, token veto, truncated IS, stats.

``log mu`` are the rollout engine's (vLLM) log-probs of the sampled tokens, ``log pi_old`` the
trainer's (FSDP) recomputation with the same weights, ``log rho = log pi_old - log mu``.
"""

from .importance import IS_LEVELS, truncated_importance_weights
from .mismatch import MismatchConfig, apply_mismatch_correction
from .rejection import RS_MODES, rejection_mask, token_veto_mask
from .stats import effective_sample_size, mismatch_stats, rejection_fractions

__all__ = [
    "IS_LEVELS",
    "RS_MODES",
    "MismatchConfig",
    "apply_mismatch_correction",
    "effective_sample_size",
    "mismatch_stats",
    "rejection_fractions",
    "rejection_mask",
    "token_veto_mask",
    "truncated_importance_weights",
]
