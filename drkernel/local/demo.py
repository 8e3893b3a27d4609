"""``SolutionMix``: a Generate wrapper that lets an untrained model reach the grader.

A tiny random model never writes a fenced ``ModelNew`` program, so a smoke run of the kernel path
would never grade anything. ``SolutionMix`` answers every ``every``-th episode with the suite's
bundled reference solution of the task in the prompt, in every turn of that episode, and samples
the other episodes from the model. The solution goes through
:meth:`~drkernel.local.hf_generate.HFGenerate.score`: its token ids and log-probs are the model's,
so it is packed, masked and trained exactly like a sampled reply. For tests and GPU timing runs
only; it is not a training method.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from drkernel.agent.extract import kernel_reply


class SolutionMix:
    def __init__(self, inner: Any, suite_dir: str | Path, *, every: int = 4):
        from drkernel.env import load_suite

        if every < 1:
            raise ValueError(f"every must be >= 1, got {every}")
        suite = load_suite(suite_dir)
        self.inner = inner
        self.every = every
        self.calls = 0
        self.pairs = []  # (reference source, solution source)
        for t in suite.tasks:
            if t.solution is not None and Path(t.solution).exists():
                self.pairs.append((Path(t.path).read_text().strip(), Path(t.solution).read_text()))
        if not self.pairs:
            raise ValueError(f"suite {suite.id} has no bundled solutions")

    @property
    def busy_seconds(self) -> float:
        return float(getattr(self.inner, "busy_seconds", 0.0))

    def stats(self) -> dict[str, float]:
        return self.inner.stats() if hasattr(self.inner, "stats") else {}

    def _solution_for(self, messages: list[dict[str, str]]) -> str | None:
        first = next((m["content"] for m in messages if m["role"] == "user"), "")
        for reference, solution in self.pairs:
            if reference and reference in first:
                return solution
        return None

    async def __call__(self, messages: list[dict[str, str]], **sampling: Any) -> Any:
        solution = self._solution_for(messages)
        answered = any(m["role"] == "assistant" and "class ModelNew" in m["content"] for m in messages)
        first_turn = not any(m["role"] == "assistant" for m in messages)
        if first_turn:
            self.calls += 1
        if solution is not None and (answered or (first_turn and self.calls % self.every == 1 % self.every)):
            reply = kernel_reply(solution)
            if hasattr(self.inner, "ascore"):  # the forward runs between decoding steps, off the event loop
                return await self.inner.ascore(messages, reply)
            return self.inner.score(messages, reply)
        return await self.inner(messages, **sampling)


__all__ = ["SolutionMix"]
