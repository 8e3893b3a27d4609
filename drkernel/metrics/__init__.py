"""Kernel-generation metrics: per-turn and best-by-turn correctness, Fast@p, speedup, hacking."""

from .kernel import FAST_THRESHOLDS, kernel_metrics, pass_at_k
from .turns import TURN_FAST_THRESHOLDS, results_to_turn_tensors, turn_metrics

__all__ = [
    "FAST_THRESHOLDS",
    "TURN_FAST_THRESHOLDS",
    "kernel_metrics",
    "pass_at_k",
    "results_to_turn_tensors",
    "turn_metrics",
]
