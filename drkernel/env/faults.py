"""The candidate's failures inside a grading worker: the exception that carries a failure's stage,
and the traceback trimmed to the candidate's own frames.

Shared by the worker (:mod:`drkernel.env.process.worker`) and the procedure it calls the model with
(:mod:`drkernel.env.measure.timing`), so neither imports the other for them. Standard library only.
"""

from __future__ import annotations

import traceback

MAX_ERR = 2000
"""Longest exception message kept (the middle is cut)."""


def trim_traceback(exc: BaseException, candidate_file: str | None) -> str:
    """The exception and the candidate's own frames, not the harness's."""
    tb = traceback.extract_tb(exc.__traceback__)
    frames = [f for f in tb if candidate_file and f.filename == candidate_file]
    lines = [f"  line {f.lineno}, in {f.name}: {f.line}" for f in frames[-4:]]
    msg = f"{type(exc).__name__}: {exc}"
    if len(msg) > MAX_ERR:
        msg = msg[:MAX_ERR // 2] + " ... " + msg[-MAX_ERR // 2:]
    return "\n".join(lines + [msg]) if lines else msg


class CandidateError(Exception):
    """A failure of the model (the candidate, or the reference in its own worker) at ``stage``."""

    def __init__(self, stage: str, message: str):
        super().__init__(message)
        self.stage = stage
        self.message = message


__all__ = ["CandidateError", "trim_traceback", "MAX_ERR"]
