"""Context trimming: the first prompt plus as many of the latest turns as fit.

A dialogue is a head (the system message, if any, and the first user prompt with the task) and a
list of turns, each an assistant reply followed by its feedback message. Before each generation

    messages = head + turns[-k:]      with the largest k <= keep_turns such that
    count(messages) <= budget         (budget = max_context_tokens - reserve_tokens)

Turns are dropped whole and oldest first, so the model always sees the task and its most recent
attempts with their feedback. ``count`` is in tokens: with a tokenizer, the length of the
chat-templated prompt; without one, an estimate of 4 characters per token plus 4 per message
(:func:`approx_tokens`). If even the head alone does not fit, :func:`fit_context` returns None and
the episode records a ``context_overflow`` turn instead of generating.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from drkernel.agent.types import Message

TokenCounter = Callable[[Sequence[Message]], int]
"""Tokens a list of chat messages takes as a prompt."""

CHARS_PER_TOKEN = 4
MESSAGE_OVERHEAD = 4


def approx_tokens(messages: Sequence[Message]) -> int:
    """Token estimate without a tokenizer: ``ceil(chars / 4) + 4`` per message."""
    return sum(-(-len(m["content"]) // CHARS_PER_TOKEN) + MESSAGE_OVERHEAD for m in messages)


def tokenizer_counter(tokenizer: Any) -> TokenCounter:
    """Exact counts from a Hugging Face tokenizer: the chat template when it has one, else the
    sum of each message's encoded length plus 4."""

    def count(messages: Sequence[Message]) -> int:
        if getattr(tokenizer, "chat_template", None):
            ids = tokenizer.apply_chat_template(list(messages), tokenize=True, add_generation_prompt=True)
            if isinstance(ids, dict):  # BatchEncoding from newer transformers
                ids = ids["input_ids"]
            return len(ids)
        return sum(len(tokenizer.encode(m["content"], add_special_tokens=False)) + MESSAGE_OVERHEAD
                   for m in messages)

    return count


def fit_context(head: Sequence[Message], turns: Sequence[tuple[Message, Message]], *,
                budget: int | None = None, keep_turns: int | None = None,
                count: TokenCounter = approx_tokens) -> tuple[list[Message], int] | None:
    """The messages to generate from, and how many turns were left out.

    Args:
        head: system message (optional) and first user prompt; always kept.
        turns: ``(assistant reply, feedback)`` pairs, oldest first.
        budget: token budget for the prompt; None = no limit.
        keep_turns: keep at most this many of the latest turns (R); None = no cap.
        count: token counter (:func:`approx_tokens` or :func:`tokenizer_counter`).

    Returns:
        ``(messages, dropped)``, or None when the head alone exceeds ``budget``.
    """
    n = len(turns) if keep_turns is None else max(0, min(len(turns), keep_turns))

    def build(k: int) -> list[Message]:
        msgs = list(head)
        for reply, feedback in turns[len(turns) - k:] if k else ():
            msgs.append(reply)
            msgs.append(feedback)
        return msgs

    if budget is None:
        return build(n), len(turns) - n
    if count(build(n)) <= budget:
        return build(n), len(turns) - n
    if count(build(0)) > budget:
        return None
    lo, hi = 0, n  # build(lo) fits, build(hi) does not: binary search on the monotone count
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if count(build(mid)) <= budget:
            lo = mid
        else:
            hi = mid
    return build(lo), len(turns) - lo


__all__ = ["TokenCounter", "approx_tokens", "tokenizer_counter", "fit_context"]
