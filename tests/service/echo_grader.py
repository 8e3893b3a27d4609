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
from drkernel.env.tasks.task import TaskError


def digest(task_source: str, source: str, seed) -> str:
    return hashlib.sha256(f"{task_source}\0{source}\0{seed}".encode()).hexdigest()[:16]


#: What a candidate containing ``FAILED=<name>`` gets: (failure_kind, the first line of error.message).
FAILURES = {
    "timeout": ("timeout", "timed out after 8s during run"),
    "killed": ("crash", "process exited during run (killed by SIGKILL)"),
    "terminated": ("crash", "process exited during run (killed by SIGTERM)"),
    "lost": ("crash", "process exited during run"),  # the zygote died before it told the status
    "protocol": ("protocol", "malformed reply during run: bad frame"),
    "exit": ("crash", "process exited during run (exit code 7)"),
    "segfault": ("crash", "process exited during run (killed by SIGSEGV)"),
    "memory": ("memory", "memory limit exceeded: 1600 MiB resident (limit 1500 MiB)"),
    "flood": ("flood", "output flood: more than 1048576 bytes"),
}


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
    ``NONFINITE`` answers :func:`nonfinite_result`; ``FAILED=<name>`` answers a failed verdict as the
    candidate's process failure ``name`` of :data:`FAILURES` decides it, ``FLAKY=<name>`` the same
    on the first call of a submission and a pass after it."""

    def __init__(self, capacity: int = 2, delay_s: float = 0.05):
        super().__init__(capacity)
        self.delay_s = delay_s
        self.calls = 0
        self.seen: dict[str, int] = {}
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
        name = digest(task.source, source, seed)
        with self._count:
            self.seen[name] = self.seen.get(name, 0) + 1
            first = self.seen[name] == 1
        if "NONFINITE" in source:
            return nonfinite_result(name)
        failed = source.split("FAILED=")[1].split()[0] if "FAILED=" in source else None
        if "FLAKY=" in source and first:
            failed = source.split("FLAKY=")[1].split()[0]
        if failed:
            kind, message = FAILURES[failed]
            return EvalResult(compiled=True, correct=False, error=EvalError("correctness", f"{message}\nUSDT: tail"),
                              feedback="failed", details={"digest": name, "failure_kind": kind, "pid": os.getpid()})
        ok = "HONEST" in source
        return EvalResult(compiled=True, correct=ok, error=None if ok else EvalError("correctness", "mismatch"),
                          feedback="ok" if ok else "wrong",
                          details={"digest": digest(task.source, source, seed), "pid": os.getpid()})


def make(config, capacity):
    """Factory for ``drkernel serve --grader tests.service.echo_grader:make`` and RayGrader."""
    return EchoGrader(capacity=capacity or 2, delay_s=float(os.environ.get("ECHO_DELAY_S", "0.05")))
