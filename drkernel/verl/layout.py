"""verl's token layout: kept as names only; the functions live in :mod:`drkernel.turns`.

verl keeps one row per trajectory: ``responses`` holds every turn's model tokens and the
environment's feedback tokens between them, ``response_mask`` is 1 on model tokens. drkernel adds
``tok_turn_index`` (0-based turn of each model token, -1 on feedback and padding) and writes each
turn's reward onto the last model token of that turn in ``rm_scores``
(:func:`drkernel.turns.turns_to_last_tokens`); :func:`drkernel.turns.tokens_to_turns` reads the
per-turn rewards back. Without ``tok_turn_index`` (a batch from another agent loop), turns are the
runs of 1 in ``response_mask`` (:func:`drkernel.turns.turn_index_from_mask`).
"""

from __future__ import annotations

from drkernel.turns import tokens_to_turns as turn_rewards_from_tokens
from drkernel.turns import turn_index_from_mask
from drkernel.turns import turns_to_tokens as turn_values_to_tokens

__all__ = ["turn_index_from_mask", "turn_rewards_from_tokens", "turn_values_to_tokens"]
