"""What the service may reuse and how it answers (issues 24 and 25), on an in-process server with
the echo grader (answers in milliseconds, so each test takes about a second):

* results with NaN/Inf leave every route as standard JSON, are stored and cached that way, and
  RemoteGrader decodes them to the grader's own EvalResult;
* transient outcomes (a worker killed from outside, a timeout beside other evaluations, a broken
  reply) are evaluated again, then answered uncached; the candidate's own failures are cached;
* the cache key holds the grader version and the runtime (torch/Triton/CUDA, device model);
* every answer says whether it came from the cache.
"""

import asyncio
import json
import sqlite3
import threading
import time

import pytest

pytest.importorskip("fastapi", reason="needs the 'serve' extra")
httpx = pytest.importorskip("httpx", reason="needs the 'serve' extra")
uvicorn = pytest.importorskip("uvicorn", reason="needs the 'serve' extra")

from drkernel.env.config import EvalConfig  # noqa: E402
from drkernel.env.result import EvalResult  # noqa: E402
from drkernel.serve import app as app_module  # noqa: E402
from drkernel.serve.app import GradingService, ServiceSettings, create_app  # noqa: E402
from drkernel.serve.cache import ResultCache, transient_reason  # noqa: E402
from drkernel.serve.codec import decode_result  # noqa: E402
from drkernel.serve.jobs import JobStore  # noqa: E402
from drkernel.serve.remote import RemoteGrader  # noqa: E402
from drkernel.env.tasks.task import Task  # noqa: E402
from tests.service.conftest import free_port  # noqa: E402
from tests.service.echo_grader import FAILURES, EchoGrader, digest, nonfinite_result  # noqa: E402
from tests.service.test_codec import same, strict_loads  # noqa: E402

TASK = Task.from_source("class Model: pass", name="echo")


class InProcessServer:
    """A GradingService on uvicorn in a thread of the test process (no torch import of its own)."""

    def __init__(self, state, grader=None, *, capacity=1, retries=2, cache=True):
        self.grader = grader or EchoGrader(capacity=capacity, delay_s=0.0)
        self.store = JobStore(state / "jobs.sqlite")
        self.cache = ResultCache(state / "cache.sqlite") if cache else None
        settings = ServiceSettings(warmup=False, transient_retries=retries, worker_died_backoff_s=0.01)
        self.service = GradingService(lambda: self.grader, base_config=EvalConfig(), store=self.store,
                                      cache=self.cache, settings=settings)
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.server = uvicorn.Server(uvicorn.Config(create_app(self.service), host="127.0.0.1", port=self.port,
                                                    log_level="warning"))
        self.thread = threading.Thread(target=self.server.run, daemon=True)
        self.thread.start()
        deadline = time.monotonic() + 30
        while not self.server.started:
            assert time.monotonic() < deadline and self.thread.is_alive(), "server did not start"
            time.sleep(0.02)
        self.http = httpx.Client(base_url=self.url, timeout=30)

    def evaluate(self, source, seed=0, **extra):
        return self.http.post("/v1/evaluate", json={"task_code": TASK.source, "candidate_code": source, "seed": seed,
                                                     **extra})

    def stop(self):
        self.http.close()
        self.server.should_exit = True
        self.thread.join(timeout=30)
        self.store.close()
        if self.cache is not None:
            self.cache.close()


@pytest.fixture
def serve(tmp_path):
    servers = []

    def make(name="s", **kw):
        server = InProcessServer(tmp_path / name, **kw)
        servers.append(server)
        return server

    yield make
    for s in servers:
        if s.thread.is_alive():
            s.stop()


def _rows(path, table, column):
    db = sqlite3.connect(path)
    try:
        return [r[0] for r in db.execute(f"SELECT {column} FROM {table}")]
    finally:
        db.close()


# -- issue 24: NaN and infinities -------------------------------------------------------------------
def test_nonfinite_results_are_standard_json_on_every_route_stored_and_cached(serve, tmp_path):
    s = serve()
    expected = nonfinite_result(digest(TASK.source, "NONFINITE", 0))
    r = s.evaluate("NONFINITE")
    assert r.status_code == 200, r.text
    body = strict_loads(r.text)
    assert body["cached"] is False and body["transient"] is None and r.headers["x-drkernel-cached"] == "false"
    assert "/details/first_failure/max_abs_err" in body["nonfinite"]
    assert same(EvalResult.from_dict(decode_result(body)), expected)

    r = s.http.post("/v1/jobs", json={"id": "again", "task_code": TASK.source, "candidate_code": "NONFINITE", "seed": 0})
    job = strict_loads(r.text)
    assert r.status_code == 202 and job["state"] == "done" and job["cached"] is True
    assert strict_loads(s.http.get("/v1/jobs/again").text)["result"] == job["result"]
    again = s.evaluate("NONFINITE")
    assert again.status_code == 200 and strict_loads(again.text)["cached"] is True
    assert s.grader.calls == 1
    for table, column, path in (("jobs", "result", "jobs.sqlite"), ("result_cache", "result", "cache.sqlite")):
        for text in _rows(tmp_path / "s" / path, table, column):
            strict_loads(text)  # the stores hold standard JSON only

    grader = RemoteGrader(s.url)
    assert same(grader.grade(TASK, "NONFINITE", seed=0), expected)            # from the cache
    assert same(grader.grade(TASK, "NONFINITE", seed=5), nonfinite_result(digest(TASK.source, "NONFINITE", 5)))
    assert grader.stats["cached"] == 1
    grader.close()
    s.stop()
    restarted = serve()  # the same state dir: the stored job and the cached verdict are sent as they are
    assert strict_loads(restarted.http.get("/v1/jobs/again").text)["result"] == job["result"]
    assert strict_loads(restarted.evaluate("NONFINITE").text)["cached"] is True


def test_a_result_that_cannot_be_sent_is_a_503_never_a_stored_answer(serve):
    class Unsendable(EchoGrader):
        def _grade(self, task, source, *, seed, options):
            result = super()._grade(task, source, seed=seed, options=options)
            result.details["handle"] = object()
            return result

    s = serve(grader=Unsendable(capacity=1, delay_s=0.0))
    r = s.evaluate("HONEST")
    assert r.status_code == 503 and "not JSON" in r.json()["detail"]
    assert len(s.cache) == 0 and s.store.counts()["done"] == 0


# -- issue 25: what may be reused -------------------------------------------------------------------
@pytest.mark.parametrize("name, reason", [
    ("timeout", "timeout"), ("killed", "worker_died"), ("terminated", "worker_died"), ("lost", "worker_died"),
    ("protocol", "protocol"), ("exit", None), ("segfault", None), ("memory", None), ("flood", None)])
def test_transient_rule(name, reason):
    kind, message = FAILURES[name]
    result = {"error": {"stage": "correctness", "message": f"trial 1: {message}\nkilled by SIGKILL in the tail"},
              "details": {"failure_kind": kind}}
    assert transient_reason(result) == reason
    assert transient_reason({"details": {}}) is None  # no process failure: the kernel's verdict
    assert transient_reason({"details": {"failure_kind": "something_new"}}) == "something_new"


@pytest.mark.parametrize("name", ["exit", "segfault", "memory", "flood"])
def test_the_candidates_own_failures_are_cached(serve, name):
    s = serve()
    first, again = s.evaluate(f"FAILED={name}").json(), s.evaluate(f"FAILED={name}").json()
    assert first["cached"] is False and again["cached"] is True and first["transient"] is None
    assert s.grader.calls == 1


def test_a_killed_worker_is_evaluated_again_and_only_the_real_verdict_is_cached(serve):
    s = serve()
    r = s.evaluate("FLAKY=killed HONEST").json()  # killed from outside on the first call, passes after
    assert r["passed"] and r["cached"] is False and s.grader.calls == 2
    assert s.evaluate("FLAKY=killed HONEST").json()["cached"] is True and s.grader.calls == 2

    r = s.evaluate("FAILED=killed").json()  # killed every time: evaluated 1 + 2 times, answered, never cached
    assert not r["passed"] and r["transient"] == "worker_died" and r["cached"] is False and s.grader.calls == 5
    r = s.evaluate("FAILED=killed").json()
    assert r["cached"] is False and s.grader.calls == 8
    assert "drkernel_transient_retries_total{reason=\"worker_died\"} 5.0" in s.http.get("/metrics").text


def test_a_timeout_alone_is_answered_uncached_a_timeout_beside_others_is_retried(serve):
    s = serve(capacity=2)
    r = s.evaluate("FAILED=timeout").json()  # nothing ran beside it: the kernel's hang, not load
    assert r["transient"] == "timeout" and not r["cached"] and s.grader.calls == 1
    assert s.evaluate("FAILED=timeout").json()["cached"] is False and s.grader.calls == 2  # graded afresh

    grader = RemoteGrader(s.url)

    async def beside(source):
        busy = asyncio.create_task(grader.agrade(TASK, "HONEST SLEEP=0.8", seed=len(source)))
        await asyncio.sleep(0.2)
        answer = await grader.agrade(TASK, source, seed=1)
        return answer, await busy

    flaky, busy = asyncio.run(beside("FLAKY=timeout HONEST SLEEP=0.1"))
    assert flaky.passed and busy.passed  # the timeout beside another evaluation was load: evaluated again
    assert s.grader.seen[digest(TASK.source, "FLAKY=timeout HONEST SLEEP=0.1", 1)] == 2
    hang, _ = asyncio.run(beside("FAILED=timeout SLEEP=0.1"))
    assert transient_reason(hang) == "timeout"  # a hang beside others: evaluated again once, not twice
    assert s.grader.seen[digest(TASK.source, "FAILED=timeout SLEEP=0.1", 1)] == 2
    grader.close()


def test_identical_jobs_waiting_on_a_transient_outcome_get_their_own_evaluation(serve):
    s = serve(retries=0)
    body = {"task_code": TASK.source, "candidate_code": "FLAKY=timeout HONEST SLEEP=0.4", "seed": 3}
    assert s.http.post("/v1/jobs", json={**body, "id": "first"}).status_code == 202
    assert s.http.post("/v1/jobs", json={**body, "id": "second"}).status_code == 202  # joins "first"
    first = s.http.get("/v1/jobs/first", params={"wait": 10}).json()
    second = s.http.get("/v1/jobs/second", params={"wait": 10}).json()
    assert first["transient"] == "timeout" and not first["result"]["passed"]
    assert second["result"]["passed"] and second["cached"] is False and s.grader.calls == 2


def test_cache_key_holds_grader_version_and_runtime(serve, monkeypatch):
    s = serve()
    assert s.evaluate("HONEST").json()["cached"] is False
    assert s.evaluate("HONEST").json()["cached"] is True
    runtime = dict(s.service.runtime)
    assert set(runtime) == {"torch", "triton", "cuda", "device"} and runtime["device"] == "cpu"
    s.stop()

    def reopen():  # the same state dir under another grader version or runtime
        return serve()

    monkeypatch.setattr(app_module, "runtime_identity", lambda devices: {**runtime, "device": "NVIDIA H200"})
    other_gpu = reopen()
    assert other_gpu.evaluate("HONEST").json()["cached"] is False  # an H200 does not reuse another device's verdict
    other_gpu.stop()
    monkeypatch.setattr(app_module, "runtime_identity", lambda devices: {**runtime, "torch": "9.9.9"})
    other_torch = reopen()
    assert other_torch.evaluate("HONEST").json()["cached"] is False
    other_torch.stop()
    monkeypatch.setattr(app_module, "runtime_identity", lambda devices: runtime)
    monkeypatch.setattr(app_module, "grader_version", lambda: "0.0.0+changedcheck")
    changed_check = reopen()
    assert changed_check.evaluate("HONEST").json()["cached"] is False
    changed_check.stop()
    monkeypatch.undo()
    same_again = reopen()
    assert same_again.evaluate("HONEST").json()["cached"] is True  # all else equal: the first verdict
    same_again.stop()


def test_a_job_accepted_before_an_upgrade_is_the_same_job_after_it(serve, monkeypatch):
    s = serve()
    body = {"id": "j1", "task_code": TASK.source, "candidate_code": "HONEST", "seed": 9}
    assert s.http.post("/v1/jobs", json=body).json()["state"] in ("queued", "running", "done")
    s.stop()
    monkeypatch.setattr(app_module, "grader_version", lambda: "0.0.0+upgraded")
    upgraded = serve()
    r = upgraded.http.post("/v1/jobs", json=body)  # a client retrying its id: no 409
    assert r.status_code == 200 and r.json()["id"] == "j1"
    assert upgraded.http.get("/v1/jobs/j1", params={"wait": 10}).json()["result"]["passed"]
