"""The evaluation result: one object per graded candidate (design brief, "Kernel evaluation result").

A bad kernel is a *result*; a broken environment is an *exception* (:class:`EnvironmentFailure`).
An environment failure is never shown to the policy as kernel feedback and never scored as a
failed kernel.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

class Stage(str, Enum):
    """Pipeline stages, in order. A failed result names the stage that failed in ``error.stage``
    (its value). A candidate passes only when every stage it entered completed."""

    STATIC = "static"
    COMPILE = "compile"
    CORRECTNESS = "correctness"
    LAUNCHES = "launches"
    TIMING = "timing"
    PROFILING = "profiling"


class EnvironmentFailure(RuntimeError):
    """The grader itself could not run (missing dependency, no device, broken worker start).

    Never a verdict on the kernel: callers must retry or surface it, not reward it.
    """


class Stop(Exception):
    """The verdict is decided: the stage that raises it ends the evaluation's run of stages (caught
    by :meth:`~drkernel.env.evaluation.Evaluation.run`; never leaves the evaluation)."""


@dataclass
class EvalError:
    """Where and why an evaluation failed."""

    stage: str
    """A :class:`Stage` value (``"compile"``, ``"correctness"``, ...)."""
    message: str
    """Short, trimmed message (the last lines of a traceback, not all of it)."""

    def to_dict(self) -> dict[str, str]:
        return {"stage": self.stage, "message": self.message}


@dataclass
class EvalResult:
    """The verdict on one candidate. A candidate *passes* when compiled, correct and not hacked."""

    compiled: bool = False
    """The candidate parsed, imported and ``ModelNew(*get_init_inputs())`` was built."""
    correct: bool = False
    """Every correctness trial (and the timed-call spot checks) matched the reference."""
    hacked: bool = False
    """At least one hack check fired; ``hack_reasons`` says which."""
    hack_reasons: list[str] = field(default_factory=list)
    """Short ids of the checks that fired (see ``drkernel.env.guards.static_checks`` and ``docs/hacks.md``)."""
    speedup: float | None = None
    """``reference_ms / kernel_ms`` (medians), when both were timed."""
    coverage: float | None = None
    """Share of the candidate's forward device time spent in its own Triton kernels, in [0, 1].
    On the CPU interpreter: 1.0 when the forward runs no torch compute outside its own kernels, else
    None (``details["profile"]["reason"]`` says why); see :mod:`drkernel.env.measure.profiling`."""
    kernel_ms: float | None = None
    """Median time of one candidate forward, in milliseconds."""
    reference_ms: float | None = None
    """Median time of one reference forward, in milliseconds."""
    error: EvalError | None = None
    """The first failure: its stage and a short message."""
    feedback: str = ""
    """Compact text for the policy model (not a JSON dump)."""
    details: dict[str, Any] = field(default_factory=dict)
    """Everything else: per-trial errors, timing spread, launched kernels, device, config."""

    @property
    def passed(self) -> bool:
        return self.compiled and self.correct and not self.hacked

    def add_hack(self, reason: str) -> None:
        if reason not in self.hack_reasons:
            self.hack_reasons.append(reason)
        self.hacked = True

    def to_dict(self) -> dict[str, Any]:
        out = dataclasses.asdict(self)
        out["error"] = self.error.to_dict() if self.error else None
        out["passed"] = self.passed
        return out

    def to_json(self, **kwargs: Any) -> str:
        return json.dumps(self.to_dict(), **kwargs)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "EvalResult":
        data = dict(data)
        data.pop("passed", None)
        err = data.get("error")
        data["error"] = EvalError(**err) if err else None
        known = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in known})
