"""``RemoteGrader``: the :class:`~drkernel.env.grader.Grader` protocol over HTTP, against one or more
``drkernel serve`` servers.

    grader = RemoteGrader(["http://gpu-box-1:8000", "http://gpu-box-2:8000"], token=...)
    result = grader.grade(task, source, seed=0)            # or: await grader.agrade(...)

Each call draws a job id once and keeps it through every retry, so the servers answer it exactly
once however often it is resent: ``POST /v1/jobs`` (idempotent by id), then long-polls
``GET /v1/jobs/{id}?wait=...`` until the job is answered.

* **Load**: each call goes to the ready server with the fewest of this client's calls in flight.
* **Retries** (same id, exponential back-off with jitter, until ``timeout_s``): connection errors,
  timeouts and 5xx mark the server down and the call moves to another server (or waits for this
  one to come back, e.g. a restarted server, which re-queued the job from its store); 429 waits
  the server's Retry-After; a job lost by its server (404 after a restart on a fresh store) is
  resubmitted. A job that failed as an environment failure is resubmitted ``env_retries`` times
  (the server re-queues it), then :class:`EnvironmentFailure` is raised.
* **Errors**: 422 (unusable task) raises :class:`~drkernel.env.tasks.task.TaskError`; 400/413 (the
  request itself is wrong: unknown option, oversized code) raise ``ValueError``; 401 (wrong or
  missing token) raises :class:`EnvironmentFailure` naming it; no answer within ``timeout_s`` raises
  :class:`EnvironmentFailure`. Never a kernel verdict.
* **Results** arrive as standard JSON (NaN and infinities as listed strings,
  :mod:`drkernel.serve.codec`) and are decoded back to the ``EvalResult`` the server's grader
  returned. ``stats["cached"]`` counts answers from a server's result cache.
* **Health**: ``/healthz`` of every server every ``health_interval_s``; a server that is not ready
  gets no new calls while another one is.

httpx is imported here only. The client runs its own event loop in a daemon thread, so ``grade``
works from plain code and ``agrade`` from any event loop (verl's agent loop, the refine loop).
"""

from __future__ import annotations

import asyncio
import os
import random
import threading
import time
import uuid
from dataclasses import dataclass
from typing import Any, Sequence

import httpx

from drkernel.env.grader import GraderBase, Options
from drkernel.env.result import EnvironmentFailure, EvalResult
from drkernel.env.tasks.task import Task, TaskError
from drkernel.serve import TOKEN_ENV
from drkernel.serve.codec import decode_result


@dataclass
class _Server:
    url: str
    ready: bool = True
    """Last health check (or request) succeeded; optimistic until a check says otherwise."""
    capacity: int = 1
    in_flight: int = 0
    last_error: str = ""


class _Retry(Exception):
    """One attempt failed in a way worth retrying; ``delay`` seconds before the next."""

    def __init__(self, message: str, delay: float | None = None):
        super().__init__(message)
        self.delay = delay


class RemoteGrader(GraderBase):
    """Grades on ``drkernel serve`` servers. See the module docstring for retries and errors.

    ``capacity``: how many calls to run at once (default: the servers' summed capacity as their
    /healthz reports it at construction, or one per server when none answers yet).
    """

    def __init__(self, base_urls: str | Sequence[str], *, token: str | None = None, capacity: int | None = None,
                 timeout_s: float = 1800.0, request_timeout_s: float = 30.0, poll_s: float = 20.0,
                 backoff_s: float = 0.25, max_backoff_s: float = 10.0, env_retries: int = 1,
                 health_interval_s: float = 5.0):
        urls = [base_urls] if isinstance(base_urls, str) else list(base_urls)
        if not urls:
            raise ValueError("RemoteGrader needs at least one base URL")
        self.servers = [_Server(u.rstrip("/")) for u in urls]
        self.token = token if token is not None else os.environ.get(TOKEN_ENV) or None
        self.timeout_s = timeout_s
        self.request_timeout_s = request_timeout_s
        self.poll_s = poll_s
        self.backoff_s = backoff_s
        self.max_backoff_s = max_backoff_s
        self.env_retries = env_retries
        self.health_interval_s = health_interval_s
        self.stats = {"submitted": 0, "retries": 0, "resubmitted": 0, "failovers": 0, "cached": 0, "transient": 0}
        """``cached``: answers from a server's cache; ``transient``: answers a server did not cache."""
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="RemoteGrader-loop", daemon=True)
        self._thread.start()
        self._client: httpx.AsyncClient = self._call(self._make_client())
        self._call(self._check_all())
        self._health_task = asyncio.run_coroutine_threadsafe(self._health_loop(), self._loop)
        if capacity is None:
            answered = [s.capacity for s in self.servers if s.ready]
            capacity = sum(answered) if answered else len(self.servers)
        super().__init__(capacity)

    # -- protocol -------------------------------------------------------------------------------
    def grade(self, task: Task, source: str, *, seed: int | None = None,
              options: Options | None = None) -> EvalResult:
        self._check(task, source, options)
        return self._call(self._grade(task, source, seed, dict(options or {})))

    async def agrade(self, task: Task, source: str, *, seed: int | None = None,
                     options: Options | None = None) -> EvalResult:
        self._check(task, source, options)
        fut = asyncio.run_coroutine_threadsafe(self._grade(task, source, seed, dict(options or {})), self._loop)
        try:
            return await asyncio.wrap_future(fut)
        except asyncio.CancelledError:
            fut.cancel()
            raise

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
        self._health_task.cancel()
        try:
            self._call(self._client.aclose())
        finally:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout=5)
        self._threads.shutdown(wait=False)

    def _call(self, coro: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result()

    async def _make_client(self) -> httpx.AsyncClient:
        headers = {"Authorization": f"Bearer {self.token}"} if self.token else {}
        limits = httpx.Limits(max_connections=512, max_keepalive_connections=64)
        return httpx.AsyncClient(headers=headers, limits=limits, timeout=httpx.Timeout(self.request_timeout_s))

    # -- one evaluation -------------------------------------------------------------------------
    async def _grade(self, task: Task, source: str, seed: int | None, options: dict[str, Any]) -> EvalResult:
        payload = {"id": uuid.uuid4().hex, "task_code": task.source, "candidate_code": source, "seed": seed,
                   "options": options, "task_name": task.name, "entry_point": task.entry_point}
        deadline = time.monotonic() + self.timeout_s
        env_failures = 0
        attempt = 0
        previous: _Server | None = None
        self.stats["submitted"] += 1
        while True:
            server = self._pick()
            if previous is not None and server is not previous:
                self.stats["failovers"] += 1
            previous = server
            server.in_flight += 1
            try:
                job = await self._submit_and_wait(server, payload, deadline)
            except _Retry as exc:
                attempt += 1
                self.stats["retries"] += 1
                delay = exc.delay if exc.delay is not None else self._backoff(attempt)
                if time.monotonic() + delay > deadline:
                    raise EnvironmentFailure(f"no answer from {[s.url for s in self.servers]} within "
                                             f"{self.timeout_s:.0f}s; last error: {exc}") from None
                await asyncio.sleep(delay)
                continue
            finally:
                server.in_flight -= 1
            if job["state"] == "done":
                self.stats["cached"] += bool(job.get("cached"))
                self.stats["transient"] += bool(job.get("transient"))
                return EvalResult.from_dict(decode_result(job["result"]))
            error = job.get("error") or {}
            if error.get("status") == 422:
                raise TaskError(error.get("message", "unusable task"))
            env_failures += 1
            if env_failures > self.env_retries:
                raise EnvironmentFailure(f"{server.url}: {error.get('message', 'environment failure')}")
            self.stats["resubmitted"] += 1  # the server re-queues a job failed by its environment

    async def _submit_and_wait(self, server: _Server, payload: dict[str, Any], deadline: float) -> dict[str, Any]:
        """POST the job (idempotent) and long-poll it until terminal; ``_Retry`` on anything transient."""
        job = self._answer(server, await self._request(server, "POST", "/v1/jobs", json=payload))
        while job["state"] not in ("done", "failed"):
            wait = max(0.0, min(self.poll_s, deadline - time.monotonic()))
            if wait <= 0:
                raise _Retry(f"job {payload['id']} still {job['state']} at the deadline", delay=0.0)
            response = await self._request(server, "GET", f"/v1/jobs/{payload['id']}", params={"wait": wait},
                                           timeout=wait + self.request_timeout_s)
            if response.status_code == 404:  # the server lost its store: send the job again
                raise _Retry(f"{server.url} no longer knows job {payload['id']}", delay=0.0)
            job = self._answer(server, response)
        return job

    async def _request(self, server: _Server, method: str, path: str, **kw: Any) -> httpx.Response:
        try:
            response = await self._client.request(method, server.url + path, **kw)
        except httpx.HTTPError as exc:  # connection refused/reset, timeouts, broken protocol
            server.ready = False
            server.last_error = f"{type(exc).__name__}: {exc}"
            raise _Retry(f"{server.url}: {server.last_error}") from None
        if response.status_code >= 500 and response.status_code != 503:
            server.ready = False
            server.last_error = f"HTTP {response.status_code}"
            raise _Retry(f"{server.url}: HTTP {response.status_code}: {response.text[:200]}")
        server.ready = True
        return response

    def _answer(self, server: _Server, response: httpx.Response) -> dict[str, Any]:
        status = response.status_code
        if status in (200, 202):
            return response.json()
        detail = _detail(response)
        if status == 429:
            retry_after = response.headers.get("retry-after", "")
            delay = float(retry_after) if retry_after.replace(".", "", 1).isdigit() else None
            raise _Retry(f"{server.url}: queue full", delay=min(delay, self.max_backoff_s) if delay else None)
        if status == 503:
            raise _Retry(f"{server.url}: unavailable: {detail}")
        if status == 422:
            raise TaskError(detail)
        if status == 401:
            raise EnvironmentFailure(f"{server.url} refused the token: {detail}")
        if status in (400, 409, 413):
            raise ValueError(f"{server.url} rejected the request ({status}): {detail}")
        raise _Retry(f"{server.url}: HTTP {status}: {detail}")

    def _pick(self) -> _Server:
        ready = [s for s in self.servers if s.ready] or self.servers
        return min(ready, key=lambda s: (s.in_flight / max(1, s.capacity), random.random()))

    def _backoff(self, attempt: int) -> float:
        return min(self.max_backoff_s, self.backoff_s * 2 ** min(attempt, 10)) * (0.5 + random.random() / 2)

    # -- health ---------------------------------------------------------------------------------
    async def _check_all(self) -> None:
        await asyncio.gather(*(self._check_one(s) for s in self.servers))

    async def _check_one(self, server: _Server) -> None:
        try:
            response = await self._client.get(server.url + "/healthz", timeout=min(5.0, self.request_timeout_s))
            body = response.json()
            server.ready = response.status_code == 200 and bool(body.get("ready"))
            server.capacity = max(1, int(body.get("capacity", 1)))
            server.last_error = "" if server.ready else str(body.get("reason", "not ready"))
        except (httpx.HTTPError, ValueError) as exc:
            server.ready = False
            server.last_error = f"{type(exc).__name__}: {exc}"

    async def _health_loop(self) -> None:
        while True:
            await asyncio.sleep(self.health_interval_s)
            await self._check_all()

    def health(self) -> list[dict[str, Any]]:
        """The servers as this client last saw them."""
        return [{"url": s.url, "ready": s.ready, "capacity": s.capacity, "in_flight": s.in_flight,
                 "last_error": s.last_error} for s in self.servers]


def _detail(response: httpx.Response) -> str:
    try:
        body = response.json()
        return str(body.get("detail", body)) if isinstance(body, dict) else str(body)
    except ValueError:
        return response.text[:500]


__all__ = ["RemoteGrader"]
