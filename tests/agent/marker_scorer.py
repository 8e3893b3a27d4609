"""A synthetic environment for agent tests: verdicts read from marker comments in the candidate.

Implements the runner's ``Scorer`` (``capacity`` + ``agrade``), as a trainer's synthetic environment
would. Markers (first match wins):

* ``# verdict: compile_error`` -> not compiled; ``# verdict: wrong`` -> compiled, incorrect;
  ``# verdict: hack`` -> hacked (``try_except``);
* otherwise a passing kernel with ``# speedup: S`` and ``# coverage: C`` (defaults 1.0 and 1.0).

Feedback is the environment's real ``build_feedback`` text. Calls are counted and the peak number
of concurrent calls is recorded.
"""

from __future__ import annotations

import asyncio
import re
from typing import Any

from drkernel.env.judge.feedback import build_feedback
from drkernel.env.result import EvalError, EvalResult


def verdict(source: str) -> EvalResult:
    r = EvalResult()
    m = re.search(r"#\s*verdict:\s*(\w+)", source)
    kind = m.group(1) if m else "pass"
    if kind == "compile_error":
        r.error = EvalError("compile", "NameError: name 'tl_undefined' is not defined")
    elif kind == "wrong":
        r.compiled = True
        r.error = EvalError("correctness", "trial 1 (native inputs): 10 of 16 elements out of tolerance")
    elif kind == "hack":
        r.compiled = True
        r.correct = True
        r.add_hack("try_except")
    else:
        speed = re.search(r"#\s*speedup:\s*([0-9.]+)", source)
        cov = re.search(r"#\s*coverage:\s*([0-9.]+)", source)
        r.compiled = r.correct = True
        r.speedup = float(speed.group(1)) if speed else 1.0
        r.coverage = float(cov.group(1)) if cov else 1.0
        r.reference_ms, r.kernel_ms = 1.0, 1.0 / r.speedup
    r.feedback = build_feedback(r)
    return r


class MarkerScorer:
    """Synthetic ``Scorer``: verdicts from markers, an optional delay, call counting."""

    def __init__(self, capacity: int = 2, delay_s: float = 0.0):
        self.capacity = capacity
        self.delay_s = delay_s
        self.calls: list[tuple[str, str]] = []
        self.in_flight = 0
        self.peak = 0

    async def agrade(self, task: Any, source: str, *, seed: int | None = None,
                     options: dict[str, Any] | None = None) -> EvalResult:
        self.calls.append((task.name, source))
        self.in_flight += 1
        self.peak = max(self.peak, self.in_flight)
        try:
            if self.delay_s:
                await asyncio.sleep(self.delay_s)
            return verdict(source)
        finally:
            self.in_flight -= 1


def kernel(speedup: float | None = None, verdict_: str | None = None, coverage: float = 1.0) -> str:
    """A candidate program carrying markers."""
    marks = f"# verdict: {verdict_}" if verdict_ else f"# speedup: {speedup}\n# coverage: {coverage}"
    return f"import torch\n{marks}\n\n\nclass ModelNew(torch.nn.Module):\n    def forward(self, x):\n        return x\n"
