"""LocalGrader passes the Grader conformance suite through its public path (grade/agrade/close),
including a concurrent case (defect 5 of issue 8: the old executor tests bypassed the pool)."""

import pytest

from drkernel.env.conformance import CHECKS, check_grader
from drkernel.env.config import EvalConfig
from drkernel.env.grader import Grader, LocalGrader


@pytest.mark.slow
def test_local_grader_conforms():
    made = []

    def make():
        g = LocalGrader(EvalConfig(device="cpu"), capacity=4)
        made.append(g)
        return g

    results = check_grader(make)
    failed = [f"{r.name}: {r.message}" for r in results if not r.ok]
    assert not failed, failed
    assert [r.name for r in results] == list(CHECKS)
    assert all(isinstance(g, Grader) for g in made)
