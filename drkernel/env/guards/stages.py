"""The evaluation's static stage: the candidate's source checked before any of it runs.

``static(ev)`` runs :func:`~drkernel.env.guards.static_checks.check_source`: a syntax error or a
missing ``ModelNew`` ends the evaluation at ``compile``; every finding marks the candidate hacked.
``ev`` is the :class:`~drkernel.env.evaluation.Evaluation` that runs the stage (imported for the
annotations only: at run time the evaluation imports its stages, never the other way).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from drkernel.env.guards.static_checks import check_source
from drkernel.env.result import Stage, Stop

if TYPE_CHECKING:  # (annotations only: at run time the evaluation imports its stages, not the other way)
    from drkernel.env.evaluation import Evaluation


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
