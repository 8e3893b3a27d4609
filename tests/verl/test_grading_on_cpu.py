"""The agent-loop workers' grader is chosen by drkernel.grader.kind and shared per process."""

from __future__ import annotations

import pytest

pytest.importorskip("verl")

from drkernel.verl.config import DEFAULTS  # noqa: E402
from drkernel.verl.grading import make_grader, prestart, shared_grader  # noqa: E402


def test_local_grader_from_settings_and_shared() -> None:
    from drkernel.env.grader import LocalGrader

    settings = {**DEFAULTS["grader"], "device": "cpu", "capacity": 2, "spares": 1, "options": {"timing_trials": 3}}
    g = make_grader(settings)
    try:
        assert isinstance(g, LocalGrader) and g.capacity == 2 and g.pool.spares == 1
        assert g.config.device == "cpu" and g.config.timing_trials == 3
    finally:
        g.close()
    assert shared_grader(settings) is shared_grader(dict(settings))


def test_prestart_is_for_node_graders_only(monkeypatch, capsys) -> None:
    """Only kind=node starts graders ahead (in the trainer's process); a failure there is printed,
    not raised (the agent-loop workers start them as before)."""
    import drkernel.verl.grading as grading

    calls = []
    monkeypatch.setattr(grading, "shared_grader", lambda s: calls.append(s["kind"]) or 1 / 0)
    for kind in ("local", "ray", "http"):
        assert prestart({**DEFAULTS["grader"], "kind": kind}) is None
    assert calls == []
    thread = prestart({**DEFAULTS["grader"], "kind": "node"})
    thread.join(10)
    assert calls == ["node"] and not thread.is_alive()
    assert "starting the node's graders ahead failed (ZeroDivisionError" in capsys.readouterr().out
    monkeypatch.setattr(grading, "shared_grader", lambda s: calls.append(s["kind"]))
    prestart({**DEFAULTS["grader"], "kind": "node"}).join(10)
    assert "the node's graders started ahead of step 1" in capsys.readouterr().out  # the run's log shows it


def test_bad_grader_settings() -> None:
    with pytest.raises(ValueError, match="local, node, ray, http"):
        make_grader({**DEFAULTS["grader"], "kind": "smoke-signals", "device": "cpu"})
    with pytest.raises(ValueError, match="url"):
        make_grader({**DEFAULTS["grader"], "kind": "http", "device": "cpu"})


def test_node_grader_is_one_actor_per_device_shared_by_every_agent_loop_worker() -> None:
    """kind=node: two agent-loop workers (Ray actors without resources, as verl's) build their
    grader; both reach the same grading actor (created by the first, attached by the second), whose
    LocalGrader grades the bundled ReLU solution and a wrong kernel for real; a worker's close()
    leaves the shared actor alive for the other."""
    import os
    from pathlib import Path

    ray = pytest.importorskip("ray")
    root = Path(__file__).resolve().parents[2]
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False,
             runtime_env={"env_vars": {"PYTHONPATH": str(root), "TRITON_INTERPRET": "1"}})
    try:
        settings = {**DEFAULTS["grader"], "kind": "node", "device": "cpu", "capacity": 2, "spares": 1,
                    "options": {"timing_trials": 3, "warmup": 1, "spot_checks": 1, "measure_performance": False}}
        task_src = (root / "envs/single_ops/tasks/01_relu.py").read_text()
        solution = (root / "envs/single_ops/solutions/01_relu.py").read_text()
        wrong = solution.replace("tl.maximum(x, 0.0)", "tl.maximum(x, 0.5)")
        assert wrong != solution

        @ray.remote(num_cpus=0)
        class AgentLoopWorker:
            async def grade(self, settings, source):
                from drkernel.env.tasks.task import Task
                from drkernel.verl.grading import shared_grader

                g = shared_grader(settings)
                r = await g.agrade(Task.from_source(task_src, name="01_relu"), source, seed=3)
                info = await g.actors[0].info.remote()
                assert info["spares"] == 1  # drkernel.grader.spares reaches the actor's warm pool
                return [a._actor_id.hex() for a in g.actors], r.correct, os.getpid()

            def close(self, settings):
                from drkernel.verl.grading import shared_grader

                shared_grader(settings).close()

        # the trainer starts the node's grading actors ahead (drkernel.verl.grading.prestart): the
        # workers below attach to that actor, not a new one
        thread = prestart(settings)
        thread.join(120)
        assert not thread.is_alive()
        named = [a["name"] for a in ray.util.list_named_actors(all_namespaces=True)]
        ahead = [n for n in named if n.startswith("drkernel-grader-")]
        assert len(ahead) == 1, named
        ahead_id = ray.get_actor(ahead[0])._actor_id.hex()
        w1, w2 = AgentLoopWorker.remote(), AgentLoopWorker.remote()
        ids1, ok1, pid1 = ray.get(w1.grade.remote(settings, solution))
        ids2, ok2, pid2 = ray.get(w2.grade.remote(settings, wrong))
        assert pid1 != pid2 and len(ids1) == 1 and ids1 == ids2  # one actor for the node's one device
        assert ids1 == [ahead_id]  # the one started ahead
        assert ok1 is True and ok2 is False
        ray.get(w1.close.remote(settings))
        assert ray.get(w2.grade.remote(settings, solution))[1] is True  # the pool lives on
    finally:
        ray.shutdown()
