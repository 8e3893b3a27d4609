"""The agent's data types: what a generation backend returns, and what an episode records.

These are the contract between the agent loop and everything around it: generation backends
(OpenAI-compatible servers, local HF models, verl's server manager) produce :class:`Generation`;
the episode runner produces :class:`Trajectory`; trainers (``drkernel.local``, ``drkernel.verl``)
and test-time scaling consume trajectories.

A backend is any async callable ``generate(messages, **sampling) -> Generation`` where
``messages`` is an OpenAI-style chat list (``[{"role": "system"|"user"|"assistant", "content": str}]``).
Token ids and log-probs are filled in when the backend has them (RL needs them; test-time scaling
does not).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

Message = dict[str, str]


@dataclass
class Generation:
    """One model reply."""

    text: str
    """The reply text (thinking included, if the model produced any)."""
    token_ids: list[int] | None = None
    """Token ids of the reply, as sampled (token-in/token-out: trainers must not re-tokenise)."""
    logprobs: list[float] | None = None
    """Log-probability of each sampled token under the rollout policy (same length as ``token_ids``)."""
    prompt_token_ids: list[int] | None = None
    """Token ids of the full prompt the reply was conditioned on, when the backend tokenised it."""
    finish_reason: str | None = None
    """``stop``, ``length`` (truncated), ... as the backend reports it."""
    usage: dict[str, int] = field(default_factory=dict)
    """``prompt_tokens`` / ``completion_tokens`` when known."""


class Generate(Protocol):
    """An async generation backend."""

    async def __call__(self, messages: list[Message], **sampling: Any) -> Generation:
        ...


__all__ = ["Generate", "Generation", "Message"]
