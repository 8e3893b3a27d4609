"""What the service may reuse and how it answers (issue 24), on an in-process server with the echo
grader (answers in milliseconds, so each test takes about a second): results with NaN/Inf leave
every route as standard JSON, are stored and cached that way, and RemoteGrader decodes them to the
grader's own EvalResult.
"""

import sqlite3
import threading
import time

import pytest

pytest.importorskip("fastapi", reason="needs the 'serve' extra")
httpx = pytest.importorskip("httpx", reason="needs the 'serve' extra")
uvicorn = pytest.importorskip("uvicorn", reason="needs the 'serve' extra")

from drkernel.env.config import EvalConfig  # noqa: E402
from drkernel.env.result import EvalResult  # noqa: E402
from drkernel.env.service.app import GradingService, ServiceSettings, create_app  # noqa: E402
from drkernel.env.service.cache import ResultCache  # noqa: E402
from drkernel.env.service.codec import decode_result  # noqa: E402
from drkernel.env.service.jobs import JobStore  # noqa: E402
from drkernel.env.service.remote import RemoteGrader  # noqa: E402
from drkernel.env.task import Task  # noqa: E402
from tests.service.conftest import free_port  # noqa: E402
from tests.service.echo_grader import EchoGrader, digest, nonfinite_result  # noqa: E402
from tests.service.test_codec import same, strict_loads  # noqa: E402

TASK = Task.from_source("class Model: pass", name="echo")


class InProcessServer:
    """A GradingService on uvicorn in a thread of the test process (no torch import of its own)."""

    def __init__(self, state, grader=None, *, capacity=1, cache=True):
        self.grader = grader or EchoGrader(capacity=capacity, delay_s=0.0)
        self.store = JobStore(state / "jobs.sqlite")
        self.cache = ResultCache(state / "cache.sqlite") if cache else None
        self.service = GradingService(lambda: self.grader, base_config=EvalConfig(), store=self.store,
                                      cache=self.cache, settings=ServiceSettings(warmup=False))
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
    assert "/details/first_failure/max_abs_err" in body["nonfinite"]
    assert same(EvalResult.from_dict(decode_result(body)), expected)

    r = s.http.post("/v1/jobs", json={"id": "again", "task_code": TASK.source, "candidate_code": "NONFINITE", "seed": 0})
    job = strict_loads(r.text)
    assert r.status_code == 202 and job["state"] == "done" and job["cached"] is True
    assert strict_loads(s.http.get("/v1/jobs/again").text)["result"] == job["result"]
    again = s.evaluate("NONFINITE")
    assert again.status_code == 200 and strict_loads(again.text) == body
    assert s.grader.calls == 1
    for table, column, path in (("jobs", "result", "jobs.sqlite"), ("result_cache", "result", "cache.sqlite")):
        for text in _rows(tmp_path / "s" / path, table, column):
            strict_loads(text)  # the stores hold standard JSON only

    grader = RemoteGrader(s.url)
    assert same(grader.grade(TASK, "NONFINITE", seed=0), expected)            # from the cache
    assert same(grader.grade(TASK, "NONFINITE", seed=5), nonfinite_result(digest(TASK.source, "NONFINITE", 5)))
    grader.close()
    s.stop()
    restarted = serve()  # the same state dir: the stored job and the cached verdict are sent as they are
    assert strict_loads(restarted.http.get("/v1/jobs/again").text)["result"] == job["result"]
    assert strict_loads(restarted.evaluate("NONFINITE").text) == body


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
