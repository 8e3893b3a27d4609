"""A grader for the delivery tests (exactly-once, kills, restarts, back-pressure): it answers from
(task, candidate, seed) alone after a short delay, so hundreds of submissions run in seconds on
2 cores. It grades nothing; the tests that check verdicts use the real LocalGrader."""

from __future__ import annotations

import hashlib
import os
import threading
import time

from drkernel.env.grader import GraderBase
from drkernel.env.result import EnvironmentFailure, EvalError, EvalResult
from drkernel.env.task import TaskError


def digest(task_source: str, source: str, seed) -> str:
    return hashlib.sha256(f"{task_source}\0{source}\0{seed}".encode()).hexdigest()[:16]


def nonfinite_result(digest_: str) -> EvalResult:
    """A result with NaN, +Inf and -Inf in every float field and nested in ``details`` (and strings
    that only look like them)."""
    nan, inf = float("nan"), float("inf")
    return EvalResult(compiled=True, correct=False, speedup=nan, coverage=inf, kernel_ms=-inf, reference_ms=nan,
                      error=EvalError("correctness", "output has 257 NaN/Inf value(s)"), feedback="Infinity",
                      details={"digest": digest_, "first_failure": {"max_abs_err": inf, "max_rel_err": -inf,
                                                                    "mismatch_frac": 1.0},
                               "trials": [{"errs": [nan, 1.5, -inf, {"deep": [inf]}]}],
                               "odd/key~name": nan, "label": "NaN", "names": ["Infinity", "-Infinity"]})


class EchoGrader(GraderBase):
    """``details.digest`` names the submission; ``passed`` iff the candidate contains ``HONEST``.
    A candidate containing ``TASK_ERROR`` / ``ENV_FAILURE`` raises those, ``KILL_WORKER`` kills the process; ``SLEEP=<s>`` delays it.
    ``NONFINITE`` answers :func:`nonfinite_result`."""

    def __init__(self, capacity: int = 2, delay_s: float = 0.05):
        super().__init__(capacity)
        self.delay_s = delay_s
        self.calls = 0
        self._count = threading.Lock()

    def _grade(self, task, source, *, seed, options):
        with self._count:
            self.calls += 1
        delay = self.delay_s
        if "SLEEP=" in source:
            delay = float(source.split("SLEEP=")[1].split()[0])
        time.sleep(delay)
        if "KILL_WORKER" in source:
            os._exit(1)  # the process serving this grader dies mid-evaluation
        if "TASK_ERROR" in source:
            raise TaskError("the task raised while loading")
        if "ENV_FAILURE" in source:
            raise EnvironmentFailure("no device")
        if "NONFINITE" in source:
            return nonfinite_result(digest(task.source, source, seed))
        ok = "HONEST" in source
        return EvalResult(compiled=True, correct=ok, error=None if ok else EvalError("correctness", "mismatch"),
                          feedback="ok" if ok else "wrong",
                          details={"digest": digest(task.source, source, seed), "pid": os.getpid()})


def make(config, capacity):
    """Factory for ``drkernel serve --grader tests.service.echo_grader:make`` and RayGrader."""
    return EchoGrader(capacity=capacity or 2, delay_s=float(os.environ.get("ECHO_DELAY_S", "0.05")))
