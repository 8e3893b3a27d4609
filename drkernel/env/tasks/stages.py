"""The evaluation's reference stage: every reference output the correctness trials compare against.

``references(ev)`` computes them from the prepared task before any candidate code can reach the GPU.
``ev`` is the :class:`~drkernel.env.evaluation.Evaluation` that runs the stage (imported for the
annotations only: at run time the evaluation imports its stages, never the other way).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from drkernel.env.device import release_if_short
from drkernel.env.tasks.prepared import TrialKey

if TYPE_CHECKING:  # (annotations only: at run time the evaluation imports its stages, not the other way)
    from drkernel.env.evaluation import Evaluation


def references(ev: Evaluation) -> None:
    """Every reference output the correctness trials compare against, before any candidate
    code can reach the GPU (a candidate that fills GPU memory cannot break them; only the
    compiler, which never has a GPU, may run meanwhile). The reference is built on the CPU
    outside the GPU gate; each trial's output is one piece of shared work (a timing that
    waits meanwhile runs between two trials)."""
    plan = ev.plan
    with ev.clock.part("reference_build"):
        ev.prepared.prebuild(plan.init_seed)
    ev.refs = {}
    with ev.shared():
        for k, (d, s, _, r) in enumerate(plan.trials):
            if k:
                ev.step_aside()
            with ev.clock.part("references"):
                ev.refs[("trial", k)] = ev.prepared.reference(plan.init_seed, TrialKey(s, d), r)
        with ev.clock.part("references"):
            if not ev.cuda:
                ev.ref_cost = ev.prepared.reference_cost(plan.init_seed, TrialKey(plan.trials[0][1], "native"))
            else:
                release_if_short(ev.device)  # the inputs drawn here: their memory, when the workers need it
