"""The evaluation's static stage: the candidate's source checked before any of it runs.

``static(ev)`` runs :func:`~drkernel.env.guards.static_checks.check_source`: a syntax error or a
missing ``ModelNew`` ends the evaluation at ``compile``; every finding marks the candidate hacked.
``ev`` is the :class:`~drkernel.env.evaluation.Evaluation` that runs the stage (not imported here:
the evaluation imports its stages, never the other way).
"""

from __future__ import annotations

from drkernel.env.guards.static_checks import check_source
from drkernel.env.result import Stage, Stop


def static(ev: Evaluation) -> None:
    ev.enter(Stage.STATIC)
    report = check_source(ev.source, ev.prepared.task.entry_point)
    for problem in (report.syntax_error, report.missing_class):
        if problem:
            ev.fail(Stage.COMPILE, problem)
            raise Stop
    ev.result.details["static"] = report.messages()
    ev.result.details["kernels_defined"] = report.kernels
    for f in report.findings:
        ev.finding(f.id, f"line {f.line}: {f.message}" if f.line else f.message)
    ev.completed.add(Stage.STATIC)
