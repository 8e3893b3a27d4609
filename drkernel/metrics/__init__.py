"""Kernel-generation metrics: per-turn and best-by-turn correctness, Fast@p, speedup, hacking."""

from .kernel import FAST_THRESHOLDS, kernel_metrics, pass_at_k

__all__ = ["FAST_THRESHOLDS", "kernel_metrics", "pass_at_k"]
