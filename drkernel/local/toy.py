"""A synthetic multi-turn task with a verifiable reward and feedback between turns.

Small enough for a tiny randomly initialised model to learn on CPU in minutes; used by
``examples/learning_curve.py`` and the trainer's tests. Each prompt hides a target digit
``d = (h + offset) mod 10`` behind a hint digit ``h`` (``0 .. num_hints - 1``) shown in the prompt::

    user:      guess the secret number . hint 4
    assistant: 6                          reward 0 (target 7)
    user:      wrong , the number is higher
    assistant: 7                          reward 1
    user:      correct ! say it again
    assistant: 7                          reward 1

The reward of a turn is 1 when the reply's first word is the target digit, else 0 (a 0-1 scale).
The feedback says ``higher``/``lower`` for a wrong digit and ``say a number`` for a reply that is
not one, so later turns can use it. Every episode runs ``num_turns`` turns (as the reference's
loop does). A random policy over the ~30-token vocabulary scores about 0.03 per turn; one that
always says the same plausible digit scores 1/num_hints on turn 1; one that reads the hint and
the feedback scores 1.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any

from drkernel.agent.types import Generation, Message

DIGITS = [str(d) for d in range(10)]
PROMPT = "guess the secret number . hint {hint}"
FEEDBACK_HIGHER = "wrong , the number is higher"
FEEDBACK_LOWER = "wrong , the number is lower"
FEEDBACK_NOT_A_NUMBER = "wrong , say a number"
FEEDBACK_CORRECT = "correct ! say it again"


def vocabulary_texts() -> list[str]:
    """Every text the task can show or expect (train the ``word`` tokenizer on these)."""
    return [PROMPT.format(hint=d) for d in DIGITS] + [FEEDBACK_HIGHER, FEEDBACK_LOWER, FEEDBACK_NOT_A_NUMBER,
                                                      FEEDBACK_CORRECT, " ".join(DIGITS)]


@dataclass
class ToyTurn:
    """One turn (the fields the trainer reads, as in ``drkernel.agent.types.Turn``)."""

    index: int
    reply: str
    reward: float
    feedback: str
    generation: Generation | None
    result: Any = None
    meaningful: bool = True


@dataclass
class ToyTrajectory:
    task: str
    turns: list[ToyTurn] = field(default_factory=list)
    error: str | None = None

    @property
    def failed(self) -> bool:
        return self.error is not None


@dataclass
class ToyItem:
    """One prompt of the task."""

    name: str
    hint: int
    target: int


class GuessEnv:
    """The guessing task as a trainer environment (``drkernel.local.trainer.Env``)."""

    def __init__(self, *, offset: int = 3, num_hints: int = 5, num_turns: int = 3):
        if not 1 <= num_hints <= 10:
            raise ValueError(f"num_hints must be in [1, 10], got {num_hints}")
        self.offset = offset
        self.num_hints = num_hints
        self.num_turns = num_turns

    def sample(self, k: int, rng: random.Random) -> list[ToyItem]:
        """``k`` prompts, hints drawn uniformly from ``0 .. num_hints - 1``."""
        items = []
        for _ in range(k):
            h = rng.randrange(self.num_hints)
            items.append(ToyItem(name=f"guess{h}", hint=h, target=(h + self.offset) % 10))
        return items

    async def episode(self, item: ToyItem, generate: Any, *, seed: int, sampling: dict[str, Any]) -> ToyTrajectory:
        """Run ``num_turns`` turns of ``item`` with ``generate``; never raises for a bad reply."""
        messages: list[Message] = [{"role": "user", "content": PROMPT.format(hint=item.hint)}]
        traj = ToyTrajectory(task=item.name)
        for t in range(self.num_turns):
            try:
                gen = await generate(messages, **sampling)
            except Exception as exc:  # a backend failure: the trajectory fails, its turns are masked
                traj.error = f"{type(exc).__name__}: {exc}"
                break
            reward, feedback = self.grade(item, gen.text)
            traj.turns.append(ToyTurn(index=t, reply=gen.text, reward=reward, feedback=feedback, generation=gen))
            messages = messages + [{"role": "assistant", "content": gen.text}, {"role": "user", "content": feedback}]
        return traj

    @staticmethod
    def grade(item: ToyItem, reply: str) -> tuple[float, str]:
        """``(reward, feedback)`` of one reply: 1 for the target digit as the first word."""
        words = reply.split()
        guess = words[0] if words else ""
        if guess not in DIGITS:
            return 0.0, FEEDBACK_NOT_A_NUMBER
        g = int(guess)
        if g == item.target:
            return 1.0, FEEDBACK_CORRECT
        return 0.0, FEEDBACK_HIGHER if item.target > g else FEEDBACK_LOWER

    def close(self) -> None:
        pass


__all__ = ["GuessEnv", "ToyItem", "ToyTrajectory", "ToyTurn", "vocabulary_texts"]
