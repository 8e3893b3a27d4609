"""The kernel environment: tasks, sandboxed evaluation, and graders.

Public names (imported lazily, so ``import drkernel.env`` stays cheap)::

    from drkernel.env import LocalGrader, EvalConfig, Task, evaluate
    with LocalGrader(EvalConfig(device="cpu")) as grader:
        result = grader.grade(Task.from_file("ref.py"), candidate_source, seed=0)

``evaluate(task, source, *, seed, config)`` grades one candidate in the calling thread (``source`` is
source text; only a ``pathlib.Path`` is read from disk). ``check_grader(make_grader)`` is the
conformance suite any Grader implementation passes.
"""

from __future__ import annotations

from drkernel._lazy import lazy_exports

_EXPORTS = {
    "evaluate": "drkernel.env.evaluation",
    "Evaluation": "drkernel.env.evaluation",
    "EvaluationCancelled": "drkernel.env.evaluation",
    "CancelToken": "drkernel.env.evaluation",
    "Stage": "drkernel.env.result",
    "check_grader": "drkernel.env.conformance",
    "EvalConfig": "drkernel.env.config",
    "EvalResult": "drkernel.env.result",
    "EvalError": "drkernel.env.result",
    "EnvironmentFailure": "drkernel.env.result",
    "Task": "drkernel.env.tasks.task",
    "TaskError": "drkernel.env.tasks.task",
    "Grader": "drkernel.env.grader",
    "GraderBase": "drkernel.env.grader",
    "LocalGrader": "drkernel.env.grader",
    "Suite": "drkernel.env.tasks.suite",
    "load_suite": "drkernel.env.tasks.suite",
}

__all__ = sorted(_EXPORTS)


__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, globals())
