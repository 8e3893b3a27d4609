"""Every bundled suite: its env.yaml loads, every task has a reference Triton solution, and every
solution passes the grader on the CPU interpreter at the reduced (``small``) sizes, with no hack
flagged — the environment's regression suite. The GPU run at full size is tests/gpu/run.sh."""

from pathlib import Path

import pytest

from drkernel.env.evaluation import evaluate
from drkernel.env.suite import load_suite

ENVS = Path(__file__).resolve().parents[2] / "envs"
SUITES = sorted(p.name for p in ENVS.iterdir() if (p / "env.yaml").is_file())
CASES = [(s, t.id) for s in SUITES for t in load_suite(ENVS / s).tasks]


def test_bundled_suites_are_complete():
    assert {"single_ops", "fused_ops"} <= set(SUITES)
    for name in SUITES:
        suite = load_suite(ENVS / name)
        assert len(suite.tasks) >= 25, name
        missing = [t.id for t in suite.tasks if t.solution is None]
        assert not missing, f"{name}: tasks without a reference solution: {missing}"


@pytest.mark.slow
@pytest.mark.parametrize("suite_name, task_id", CASES, ids=[f"{s}/{t}" for s, t in CASES])
def test_reference_solution_passes_on_cpu(suite_name, task_id):
    suite = load_suite(ENVS / suite_name)
    st = suite.task(task_id)
    config = suite.eval_config(device="cpu")
    r = evaluate(st.task(suite.entry_point), st.solution, seed=4242, config=config)
    assert r.passed, f"{suite_name}/{task_id}: {r.hack_reasons} {r.error}\n{r.feedback}"
    assert r.coverage is not None and r.coverage > 0.5, r.details.get("profile")
