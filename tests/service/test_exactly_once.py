"""Exactly-once answers over HTTP under SIGKILLed servers, restarts, back-pressure and environment
failures. The servers are real ``drkernel serve`` processes; their grader is tests/service/echo_grader
(answers in milliseconds from the submission itself) so hundreds of submissions fit in CI time: what
is under test is the delivery (job store, queue, retries), not the verdicts (test_http.py)."""

import asyncio
import threading
import time

import pytest

pytest.importorskip("fastapi", reason="needs the 'serve' extra")
httpx = pytest.importorskip("httpx", reason="needs the 'serve' extra")

from drkernel.env.result import EnvironmentFailure  # noqa: E402
from drkernel.serve.remote import RemoteGrader  # noqa: E402
from drkernel.env.tasks.task import Task, TaskError  # noqa: E402
from tests.service.echo_grader import digest  # noqa: E402

ECHO = ("--grader", "tests.service.echo_grader:make", "--no-warmup")
TASK = Task.from_source("class Model: pass", name="echo")


def test_a_killed_and_restarted_server_answers_every_job_it_accepted(make_server):
    server = make_server(*ECHO, "--workers", "2", "--no-cache", env={"ECHO_DELAY_S": "0.1"}).start()
    ids = [f"job-{i}" for i in range(40)]
    with httpx.Client(base_url=server.url, timeout=30) as c:
        for i, job_id in enumerate(ids):
            r = c.post("/v1/jobs", json={"id": job_id, "task_code": TASK.source, "candidate_code": "HONEST",
                                         "seed": i})
            assert r.status_code == 202
        time.sleep(0.6)  # some answered, two running, the rest queued
    server.kill()
    before = server.job_rows()
    assert set(before) == set(ids)
    states = [s for s, _ in before.values()]
    assert states.count("done") < len(ids) and states.count("queued") > 0, states

    server.start()
    with httpx.Client(base_url=server.url, timeout=60) as c:
        jobs = [c.get(f"/v1/jobs/{job_id}", params={"wait": 30}).json() for job_id in ids]
        metrics = c.get("/metrics").text
    assert [j["state"] for j in jobs] == ["done"] * len(ids)
    assert [j["result"]["details"]["digest"] for j in jobs] == [digest(TASK.source, "HONEST", i)
                                                               for i in range(len(ids))]
    # answered before the kill: kept as they were, not graded again
    for job in jobs:
        if before[job["id"]][0] == "done":
            assert job["attempts"] == before[job["id"]][1] == 1
    recovered = sum(s != "done" for s, _ in before.values())
    assert f"drkernel_jobs_recovered_total {float(recovered)}" in metrics


@pytest.mark.slow
def test_200_submissions_with_servers_killed_midway_are_answered_exactly_once(make_server):
    env = {"ECHO_DELAY_S": "0.05"}
    a = make_server(*ECHO, "--workers", "2", "--no-cache", name="a", env=env).start()
    b = make_server(*ECHO, "--workers", "2", "--no-cache", name="b", env=env).start()
    grader = RemoteGrader([a.url, b.url], backoff_s=0.05, max_backoff_s=1.0, poll_s=5.0, timeout_s=120,
                          health_interval_s=0.5)
    n = 200
    answers: dict[int, list] = {i: [] for i in range(n)}
    progress = threading.Event()

    async def one(i, limit):
        async with limit:
            source = f"HONEST submission {i}" if i % 3 else f"wrong submission {i}"
            result = await grader.agrade(TASK, source, seed=i)
            answers[i].append((source, result))
            if sum(map(bool, answers.values())) >= 40:
                progress.set()

    def killer():
        progress.wait(60)
        a.kill()            # mid-run: jobs of a are queued, running and answered-but-unread;
        time.sleep(1.0)     # the client fails them over to b (same ids) ...
        a.start()           # ... and a, restarted on its store, answers what it had accepted

    async def run():
        limit = asyncio.Semaphore(24)
        await asyncio.gather(*(one(i, limit) for i in range(n)))

    t = threading.Thread(target=killer)
    t.start()
    asyncio.run(run())
    t.join()
    stats = dict(grader.stats)
    grader.close()
    a.drain(), b.drain()  # a, restarted, may still answer jobs its client got from b meanwhile
    a.stop(), b.stop()

    assert all(len(v) == 1 for v in answers.values())          # every submission: exactly one answer
    for i, [(source, result)] in answers.items():              # ... and it is its own
        assert result.details["digest"] == digest(TASK.source, source, i)
        assert result.passed == ("HONEST" in source)
    rows_a, rows_b = a.job_rows(), b.job_rows()
    assert len(set(rows_a) | set(rows_b)) == n  # retries and failovers reused the ids: no extra jobs
    assert all(s == "done" for s, _ in [*rows_a.values(), *rows_b.values()])  # nothing left unanswered
    assert stats["retries"] > 0 and stats["failovers"] > 0, stats  # the kill was felt


def test_full_queue_is_429_with_retry_after_and_the_client_waits_its_turn(make_server):
    server = make_server(*ECHO, "--workers", "1", "--queue-size", "2", "--no-cache",
                         env={"ECHO_DELAY_S": "0.3"}).start()
    with httpx.Client(base_url=server.url, timeout=30) as c:
        codes = [c.post("/v1/jobs", json={"task_code": "x = 1", "candidate_code": "HONEST", "seed": i})
                 for i in range(6)]
    assert [r.status_code for r in codes[:3]] == [202] * 3
    refused = [r for r in codes if r.status_code == 429]
    assert refused and all(int(r.headers["retry-after"]) >= 1 for r in refused)
    assert "queue full" in refused[0].json()["detail"]

    grader = RemoteGrader(server.url, backoff_s=0.05)

    async def run():
        return await asyncio.gather(*(grader.agrade(TASK, "HONEST", seed=100 + i) for i in range(8)))

    results = asyncio.run(run())
    assert [r.details["digest"] for r in results] == [digest(TASK.source, "HONEST", 100 + i) for i in range(8)]
    assert grader.stats["retries"] > 0
    grader.close()


def test_environment_failure_is_503_after_one_grader_restart_and_task_errors_are_422(make_server):
    server = make_server(*ECHO, "--workers", "1", env={"ECHO_DELAY_S": "0"}).start()
    with httpx.Client(base_url=server.url, timeout=30) as c:
        r = c.post("/v1/evaluate", json={"task_code": "x = 1", "candidate_code": "ENV_FAILURE"})
        assert r.status_code == 503 and "no device" in r.json()["detail"]
        r = c.post("/v1/evaluate", json={"task_code": "x = 1", "candidate_code": "TASK_ERROR"})
        assert r.status_code == 422 and "task raised" in r.json()["detail"]
        metrics = c.get("/metrics").text
    assert "drkernel_worker_restarts_total 1.0" in metrics
    assert 'drkernel_evaluations_total{verdict="environment_failure"} 1.0' in metrics
    grader = RemoteGrader(server.url)
    with pytest.raises(EnvironmentFailure, match="no device"):
        grader.grade(TASK, "ENV_FAILURE again")
    with pytest.raises(TaskError, match="task raised"):
        grader.grade(TASK, "TASK_ERROR again")
    assert grader.grade(TASK, "HONEST", seed=1).passed  # the server keeps serving
    grader.close()


def test_client_without_a_server_fails_as_an_environment_failure():
    grader = RemoteGrader("http://127.0.0.1:9", timeout_s=1.0, backoff_s=0.05)
    assert grader.capacity == 1 and not grader.health()[0]["ready"]
    with pytest.raises(EnvironmentFailure, match="no answer"):
        grader.grade(TASK, "HONEST")
    grader.close()
