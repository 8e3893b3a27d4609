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

import dataclasses
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:  # the agent imports the environment's result type lazily
    from drkernel.env.result import EvalResult

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




#: ``Turn.status`` values.
TURN_STATUSES = ("graded", "no_code", "context_overflow")


@dataclass
class Turn:
    """One turn of an episode: the context the model saw, its reply, the verdict and the reward.

    ``index`` is the turn's global position in its task's run (0-based); with test-time scaling
    the context of a later turn holds a selection of earlier turns, not all of them.
    """

    index: int
    """Global 0-based position of the turn in its task's run."""
    prompt: list[Message]
    """The messages the reply was conditioned on (after context trimming)."""
    reply: str
    """The model's reply text (empty for a ``context_overflow`` turn)."""
    code: str | None
    """The program extracted from the reply; None when it held no usable code block."""
    code_span: tuple[int, int] | None
    """``(start, end)`` character span of the code block's body in ``reply``: tokens inside it are
    code, the rest reasoning (TritonRL's hierarchical split). None without code."""
    result: "EvalResult | None"
    """The grader's verdict; None when nothing was graded (no code, context overflow)."""
    reward: float
    """The turn reward (``drkernel.rewards``; 0 when nothing was graded)."""
    feedback: str
    """The user message that follows this turn (compact feedback for the next reply)."""
    status: str = "graded"
    """``graded``, ``no_code`` (reply without a code block) or ``context_overflow`` (the first
    prompt alone did not fit the context budget: nothing was generated)."""
    meaningful: bool = True
    """Trained on (``drkernel.rewards.meaningful_turn_mask``): False for a post-success regression
    and for every turn of a failed trajectory. Set when the episode ends."""
    generation: Generation | None = None
    """The backend's output: token ids, log-probs, prompt token ids, finish reason, usage."""
    dropped_turns: int = 0
    """Earlier turns left out of ``prompt`` to fit the context budget."""
    seconds: dict[str, float] = field(default_factory=dict)
    """Wall time of the ``generate`` and ``grade`` calls of this turn (not the time queued for a slot)."""

    @property
    def passed(self) -> bool:
        return self.result is not None and self.result.passed

    @property
    def speedup(self) -> float | None:
        return None if self.result is None else self.result.speedup

    def assistant_message(self) -> Message:
        return {"role": "assistant", "content": self.reply}

    def feedback_message(self) -> Message:
        return {"role": "user", "content": self.feedback}

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict (``from_dict`` reads it back)."""
        return {
            "index": self.index, "status": self.status, "prompt": self.prompt, "reply": self.reply,
            "code": self.code, "code_span": list(self.code_span) if self.code_span else None,
            "result": self.result.to_dict() if self.result is not None else None, "reward": self.reward,
            "feedback": self.feedback, "meaningful": self.meaningful,
            "generation": dataclasses.asdict(self.generation) if self.generation is not None else None,
            "dropped_turns": self.dropped_turns, "seconds": self.seconds,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "Turn":
        from drkernel.env.result import EvalResult

        span = data.get("code_span")
        gen = data.get("generation")
        return cls(index=int(data["index"]), prompt=list(data["prompt"]), reply=data["reply"], code=data.get("code"),
                   code_span=tuple(span) if span else None,
                   result=EvalResult.from_dict(data["result"]) if data.get("result") else None,
                   reward=float(data["reward"]), feedback=data.get("feedback", ""),
                   status=data.get("status", "graded"), meaningful=bool(data.get("meaningful", True)),
                   generation=Generation(**gen) if gen else None, dropped_turns=int(data.get("dropped_turns", 0)),
                   seconds=dict(data.get("seconds") or {}))


@dataclass
class Trajectory:
    """The turns of one task's episode (or of one test-time-scaling run), in generation order."""

    task: str
    """Task name (``Task.name``)."""
    turns: list[Turn] = field(default_factory=list)
    error: str | None = None
    """Why the episode stopped early: a generation backend or environment failure. The turns
    before it are kept; a failed trajectory's turns are all masked (``meaningful`` False)."""

    @property
    def failed(self) -> bool:
        return self.error is not None

    @property
    def turn_rewards(self) -> list[float]:
        """r_t of each turn."""
        return [t.reward for t in self.turns]

    @property
    def turn_mask(self) -> list[bool]:
        """The meaningful-turn flags (True = trained)."""
        return [t.meaningful for t in self.turns]

    def best_turn(self) -> Turn | None:
        """The best candidate: the passing turn with the highest speedup (then reward, then the
        earliest); without a passing turn, the highest-reward turn (the earliest on ties)."""
        if not self.turns:
            return None
        passing = [t for t in self.turns if t.passed]
        if passing:
            return max(passing, key=lambda t: (t.speedup if t.speedup is not None else float("-inf"), t.reward,
                                               -t.index))
        return max(self.turns, key=lambda t: (t.reward, -t.index))

    def to_dict(self) -> dict[str, Any]:
        return {"task": self.task, "error": self.error, "turns": [t.to_dict() for t in self.turns]}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "Trajectory":
        return cls(task=data["task"], error=data.get("error"), turns=[Turn.from_dict(t) for t in data["turns"]])


__all__ = ["Generate", "Generation", "Message", "Turn", "Trajectory", "TURN_STATUSES"]
