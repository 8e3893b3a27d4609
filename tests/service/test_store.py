"""The job store and the result cache on their own: idempotent ids, first answer wins, restart
recovery, cache keys that change with every input (runtime included), a bounded cache that holds
only reusable verdicts, a bounded job store, CachedGrader."""

import pytest

from drkernel.env.config import EvalConfig
from drkernel.serve.cache import CachedGrader, ResultCache, cache_key, config_dict, grader_version, \
    runtime_identity
from drkernel.serve.jobs import JobConflict, JobStore
from drkernel.env.tasks.task import Task
from tests.service.echo_grader import EchoGrader

REQ = {"task_code": "t", "candidate_code": "c", "seed": 1, "options": {}}


def test_submit_is_idempotent_and_conflicts_on_a_different_request(tmp_path):
    store = JobStore(tmp_path / "jobs.sqlite")
    job, created = store.submit("a", "k1", REQ)
    again, created_again = store.submit("a", "k1", REQ)
    assert created and not created_again and again.id == job.id and again.state == "queued"
    with pytest.raises(JobConflict, match="different request"):
        store.submit("a", "k2", REQ)
    assert store.counts()["queued"] == 1


def test_first_answer_wins(tmp_path):
    store = JobStore(tmp_path / "jobs.sqlite")
    store.submit("a", "k", REQ)
    assert store.mark_running("a")
    assert store.finish("a", {"passed": True})
    assert not store.finish("a", {"passed": False})           # a second evaluation's answer is dropped
    assert not store.fail("a", status=503, kind="environment_failure", message="late")
    assert not store.mark_running("a")
    job = store.get("a")
    assert job.state == "done" and job.result == {"passed": True} and job.error is None and job.attempts == 1


def test_unanswered_jobs_survive_a_reopen(tmp_path):
    path = tmp_path / "jobs.sqlite"
    store = JobStore(path)
    for i in range(4):
        store.submit(f"j{i}", f"k{i}", REQ)
    store.mark_running("j1")
    store.finish("j2", {"x": 1})
    del store  # no close: the process "died"
    reopened = JobStore(path)
    assert [j.id for j in reopened.unfinished()] == ["j0", "j1", "j3"]
    assert reopened.get("j1").attempts == 1 and reopened.get("j2").result == {"x": 1}


def test_environment_failures_can_be_requeued_but_verdicts_cannot(tmp_path):
    store = JobStore(tmp_path / "jobs.sqlite")
    store.submit("a", "k", REQ)
    store.submit("b", "k2", REQ)
    store.fail("a", status=503, kind="environment_failure", message="no device")
    store.finish("b", {"passed": True})
    assert store.requeue("a") and store.get("a").state == "queued" and store.get("a").error is None
    assert not store.requeue("b") and store.get("b").state == "done"


def test_cache_key_changes_with_every_input():
    cfg = config_dict(EvalConfig())
    base = dict(task_code="t", entry_point="Model", candidate_code="c", seed=1, config=cfg, version="v1")
    keys = {cache_key(**base)}
    runtime = runtime_identity(("cpu",))
    for change in ({"task_code": "t2"}, {"entry_point": "M"}, {"candidate_code": "c2"}, {"seed": 2},
                   {"seed": None}, {"config": config_dict(EvalConfig(atol=1e-3))}, {"version": "v2"},
                   {"runtime": {**runtime, "device": "NVIDIA H100 80GB HBM3"}},
                   {"runtime": {**runtime, "device": "NVIDIA H200"}}, {"runtime": {**runtime, "torch": "2.99"}},
                   {"runtime": {**runtime, "triton": "9.0"}}, {"runtime": {**runtime, "cuda": "13.0"}}):
        keys.add(cache_key(**{**base, **change}))
    assert len(keys) == 13
    assert cache_key(**base) == cache_key(**dict(base)) == cache_key(**base, runtime=runtime)  # stable; CPU default
    assert grader_version().startswith("0.") and "+" in grader_version()
    assert runtime["device"] == "cpu" and runtime["torch"] and runtime["triton"]


def test_cache_is_bounded_and_persistent(tmp_path):
    cache = ResultCache(tmp_path / "c.sqlite", max_entries=10)
    for i in range(25):
        cache.put(f"k{i}", {"i": i})
    assert len(cache) <= 10
    assert cache.get("k24") == {"i": 24} and cache.get("k0") is None
    assert (cache.hits, cache.misses) == (1, 1)
    assert ResultCache(tmp_path / "c.sqlite").get("k24") == {"i": 24}


def test_cache_holds_only_reusable_verdicts_and_can_be_cleared(tmp_path):
    cache = ResultCache(tmp_path / "c.sqlite")
    timeout = {"compiled": True, "details": {"failure_kind": "timeout"}}
    crash = {"compiled": True, "error": {"stage": "correctness", "message": "exited (exit code 7)"},
             "details": {"failure_kind": "crash"}}
    assert not cache.put("t", timeout) and cache.get("t") is None
    assert cache.put("c", crash) and cache.get("c") == crash
    assert cache.clear() == 1 and len(cache) == 0


def test_answered_jobs_are_bounded_unanswered_ones_kept(tmp_path):
    store = JobStore(tmp_path / "jobs.sqlite", max_answered=50)
    store.submit("waiting", "kw", REQ)
    for i in range(200):
        store.submit(f"j{i}", f"k{i}", REQ)
        store.finish(f"j{i}", {"i": i})
    counts = store.counts()
    assert counts["done"] <= 50 + 63 and counts["queued"] == 1  # checked every 64 answers
    assert store.get("j199") is not None and store.get("j0") is None and store.get("waiting") is not None
    assert JobStore(tmp_path / "jobs.sqlite", max_answered=50).counts()["done"] <= 50  # and at open


def test_cached_grader_answers_repeats_without_grading():
    inner = EchoGrader(capacity=1, delay_s=0.0)
    grader = CachedGrader(inner, identity=EvalConfig())
    task = Task.from_source("x = 1", name="t")
    first = grader.grade(task, "HONEST", seed=3)
    second = grader.grade(task, "HONEST", seed=3)
    other_seed = grader.grade(task, "HONEST", seed=4)
    assert inner.calls == 2 and first.to_dict() == second.to_dict()
    assert other_seed.details["digest"] != first.details["digest"]
    grader.grade(task, "FAILED=killed", seed=3)
    grader.grade(task, "FAILED=killed", seed=3)
    assert inner.calls == 4  # a worker killed from outside is no verdict to reuse
    grader.close()
