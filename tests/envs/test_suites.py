"""Every bundled suite: its env.yaml loads, every task has a reference Triton solution, and every
solution passes the grader on the CPU interpreter at the reduced (``small``) sizes, with no hack
flagged — the environment's regression suite. The GPU run at full size is tests/gpu/run.sh.

The solutions are graded ahead of their tests through one warm LocalGrader per suite (the suite's
protocol, capacity 2: two solutions at once on CI's 2 cores, each still in a fresh process of its
own); each test checks its own solution's verdict."""

from pathlib import Path

import pytest

from drkernel.env.grader import LocalGrader
from drkernel.env.tasks.suite import load_suite
from tests.grading_ahead import GradedAhead, selected_params

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


@pytest.fixture(scope="module")
def verdicts(request):
    """The verdict of each selected suite solution, graded ahead (see the module docstring)."""
    import threading

    lock = threading.Lock()
    graders: dict[str, tuple] = {}  # suite name -> (Suite, LocalGrader)

    def grade(suite_name, task_id):
        with lock:  # a suite's grader starts when its first solution is graded
            if suite_name not in graders:
                suite = load_suite(ENVS / suite_name)
                graders[suite_name] = suite, LocalGrader(suite.eval_config(device="cpu"), capacity=2, spares=1)
            suite, grader = graders[suite_name]
        st = suite.task(task_id)
        return grader.grade(st.task(suite.entry_point), st.solution.read_text(), seed=4242)

    ahead = GradedAhead(workers=2)
    for p in selected_params(request, "test_reference_solution_passes_on_cpu"):
        ahead.submit((p["suite_name"], p["task_id"]), grade, p["suite_name"], p["task_id"])
    try:
        yield lambda suite_name, task_id: ahead.result((suite_name, task_id), grade, suite_name, task_id)
    finally:
        ahead.close()
        for _, g in graders.values():
            g.close()


@pytest.mark.slow
@pytest.mark.parametrize("suite_name, task_id", CASES, ids=[f"{s}/{t}" for s, t in CASES])
def test_reference_solution_passes_on_cpu(suite_name, task_id, verdicts):
    r = verdicts(suite_name, task_id)
    assert r.passed, f"{suite_name}/{task_id}: {r.hack_reasons} {r.error}\n{r.feedback}"
    assert r.coverage is not None and r.coverage > 0.5, r.details.get("profile")
