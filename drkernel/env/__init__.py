"""The kernel environment: tasks, sandboxed evaluation, and graders.

Public names (imported lazily, so ``import drkernel.env`` stays cheap)::

    from drkernel.env import LocalGrader, EvalConfig, Task, evaluate
    with LocalGrader(EvalConfig(device="cpu")) as grader:
        result = grader.grade(Task.from_file("ref.py"), candidate_source, seed=0)

``evaluate(task, source, *, seed, config)`` grades one candidate in the calling thread (``source`` is
source text; only a ``pathlib.Path`` is read from disk). ``check_grader(make_grader)`` is the
conformance suite any Grader implementation passes.

Where things live. Five rooms, one concern each; each room's ``stages.py`` holds its stages of an
evaluation:

* ``tasks/``: what is graded against: loading a task, suites, prepared tasks with their cached
  reference outputs, the float64 oracle, the reference's timing.
* ``process/``: the candidate's process: started (zygote, exec), limited, confined, ended; the
  worker inside it and its request loop; outputs read back through shared memory; the compiler.
* ``guards/``: what keeps a candidate honest: static checks, the audit hook, the seal, the table
  of findings.
* ``measure/``: time and whose work it is: the calling procedure, the launch budget, the GPU gate,
  the reference's timing, spot checks, profiling and attribution.
* ``judge/``: whether an output is right and what the model is told: comparison, the precision
  verdict and its kernels, feedback.

At this level stay the modules every room shares or that put the rooms together: below the rooms
the contracts (:mod:`.config` the settings, :mod:`.protocol` the grader-worker messages,
:mod:`.result` the result and its stages, :mod:`.faults` the candidate's failures inside a worker,
:mod:`.device` the grader's own use of the device), on top the assembly (:mod:`.evaluation`: one
candidate, the pipeline of stages; :mod:`.grader`: the ``Grader`` protocol and ``LocalGrader``;
:mod:`.conformance`). Imports go one way: contracts, then guards, judge, measure, tasks, process,
then the rooms' stages, then the assembly; ``tests/env/test_import_layers.py`` fails on an import
cycle, on an import up these layers (two lazy ones are listed there with their reasons) and on a
file over 800 lines.
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
