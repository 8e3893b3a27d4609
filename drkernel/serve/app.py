"""The grading service: a FastAPI app in front of one :class:`~drkernel.env.grader.Grader`.

Request path::

    POST /v1/evaluate | POST /v1/jobs | POST /v1/openrlhf/reward (one job per sample, drkernel.serve.openrlhf)
      -> auth (optional bearer token) -> body read with a size cap -> schema check (400 / 413)
      -> options resolved against the base EvalConfig (400 naming a bad field)
      -> cache key; job row inserted in SQLite (idempotent by job id; 409 on a reused id)
      -> cache hit: answered now | identical job in flight: joins it | queue full: 429 + Retry-After
      -> bounded in-memory queue -> ``capacity`` consumers -> ``grader.agrade`` -> one stored answer
    GET /v1/jobs/{id}[?wait=S] reads the stored answer (long-polls up to S seconds);
    POST /v1/evaluate waits for it and answers the EvalResult (422 unusable task, 503 environment).

Every result leaves as standard JSON (:mod:`drkernel.serve.codec`: NaN and infinities as
strings listed under ``"nonfinite"``), with ``cached`` (answered from the result cache or a
concurrent identical job) and ``transient`` (None, or why the outcome was not cached).

Transient outcomes (:func:`~drkernel.serve.cache.transient_reason`: a worker killed from
outside, a broken reply, a timeout) are never cached and never handed to a concurrent identical
job; the job is evaluated again up to ``transient_retries`` times first (worker deaths come in
bursts: an OOM kill, spares killed together), a timeout at most once and only when other
evaluations ran beside it (that is load; a timeout alone is the kernel's hang, answered as it is).

Exactly once: see :mod:`drkernel.serve.jobs`. On start the service re-queues every job the
store holds as queued or running, so a killed and restarted server answers what it accepted; a job
whose evaluation was started ``max_attempts`` times without an answer (it keeps killing the server)
fails as an environment failure instead of looping.

fastapi, uvicorn and prometheus-client are imported here, never by ``import drkernel.env``.
"""

from __future__ import annotations

import asyncio
import hmac
import json
import logging
import math
import re
import time
import uuid
from collections import deque
from dataclasses import dataclass, fields
from typing import Any, Callable

from fastapi import Depends, FastAPI, HTTPException, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from pydantic import BaseModel, ConfigDict, ValidationError

from drkernel.env.config import EvalConfig
from drkernel.env.result import EnvironmentFailure, EvalResult
from drkernel.env.tasks.task import Task, TaskError
from drkernel.serve.cache import ResultCache, cache_key, config_dict, grader_version, runtime_identity, \
    transient_reason
from drkernel.serve.codec import decode_result, encode_result
from drkernel.serve.jobs import DONE, FAILED, Job, JobConflict, JobStore

log = logging.getLogger("drkernel.serve")

_ID_RE = re.compile(r"^[A-Za-z0-9._:-]{1,128}$")
_CONFIG_FIELDS = {f.name for f in fields(EvalConfig)}
#: Options a request may not carry, and why.
_FIXED_OPTIONS = {"device": "the server chose its devices", "entry_point": "give entry_point at the top level"}


@dataclass
class ServiceSettings:
    """Limits and switches of one service."""

    max_queue: int = 256
    """Jobs waiting beyond ``capacity`` running ones; one more is answered 429 with Retry-After."""
    max_body_bytes: int = 2 << 20
    """Largest request body; more is 413."""
    max_code_chars: int = 512 << 10
    """Largest ``task_code`` / ``candidate_code``; more is 413."""
    token: str | None = None
    """Bearer token every endpoint but /healthz requires; None: open."""
    warmup: bool = True
    """Grade one probe kernel at start; /healthz says ready only after it passed."""
    max_attempts: int = 3
    """Evaluation starts of one job (server restarts mid-evaluation) before it fails as a 503."""
    max_wait_s: float = 60.0
    """Longest long-poll of ``GET /v1/jobs/{id}?wait=``."""
    transient_retries: int = 2
    """Further evaluations of a job whose outcome was transient before that outcome is answered (a
    timeout: at most one, and only when another evaluation ran beside it)."""
    worker_died_backoff_s: float = 0.5
    """Wait before evaluating again after a worker died (doubling per retry): a burst of kills
    leaves dead spares the grader's pool has not noticed yet, and the next attempt would take one."""
    max_reward_body_bytes: int = 64 << 20
    """Largest body of the OpenRLHF reward route (a batch of prompts and responses); more is 413."""
    max_reward_batch: int = 4096
    """Most samples in one OpenRLHF reward request; more is 413."""


class EvaluateRequest(BaseModel):
    """Body of ``POST /v1/evaluate`` and ``POST /v1/jobs``."""

    model_config = ConfigDict(extra="forbid", strict=True)

    task_code: str
    candidate_code: str
    seed: int | None = None
    options: dict[str, Any] | None = None
    task_name: str = "task"
    entry_point: str = "Model"
    id: str | None = None
    """Idempotency key: the same id always names the same job (clients retry with it)."""


def verdict_label(result: EvalResult) -> str:
    """The ``verdict`` label of ``drkernel_evaluations_total``."""
    if result.passed:
        return "passed"
    if result.hacked:
        return "hacked"
    if not result.compiled:
        return "compile_failed"
    return "incorrect"


class _Metrics:
    def __init__(self, service: "GradingService"):
        self.registry = CollectorRegistry()
        r = self.registry
        self.queue_depth = Gauge("drkernel_queue_depth", "Jobs accepted and not yet started", registry=r)
        self.queue_depth.set_function(lambda: service.queue_depth)
        self.running = Gauge("drkernel_jobs_running", "Evaluations in progress", registry=r)
        self.running.set_function(lambda: service.running)
        self.evaluations = Counter("drkernel_evaluations", "Answered jobs by verdict (task_error and "
                                   "environment_failure are not verdicts)", ["verdict"], registry=r)
        self.latency = Histogram("drkernel_evaluation_seconds", "Wall time of one evaluation (cache hits excluded)",
                                 buckets=(0.1, 0.25, 0.5, 1, 2, 5, 10, 20, 30, 60, 120, 300, 600), registry=r)
        self.restarts = Counter("drkernel_worker_restarts", "Grader restarts after an environment failure",
                                registry=r)
        self.cache_hits = Counter("drkernel_cache_hits", "Jobs answered from the result cache or a concurrent "
                                  "identical job", registry=r)
        self.rejected = Counter("drkernel_requests_rejected", "Requests refused, by HTTP status", ["status"],
                                registry=r)
        self.recovered = Counter("drkernel_jobs_recovered", "Unanswered jobs re-queued at start", registry=r)
        self.transient_retries = Counter("drkernel_transient_retries", "Jobs evaluated again after a "
                                         "transient outcome, by reason", ["reason"], registry=r)
        self.transient_answers = Counter("drkernel_transient_answers", "Jobs answered with a transient "
                                         "outcome (not cached), by reason", ["reason"], registry=r)
        # LocalGrader's warm pool: every candidate gets a fresh worker process, started ahead of time
        self.worker_starts = Gauge("drkernel_worker_processes_started", "Candidate worker processes the "
                                   "grader started (one per candidate; since the last grader restart)", registry=r)
        self.worker_starts.set_function(lambda: service.grader_stat("started"))
        self.worker_start_failures = Gauge("drkernel_worker_start_failures", "Worker processes that failed "
                                           "to start (since the last grader restart)", registry=r)
        self.worker_start_failures.set_function(lambda: service.grader_stat("start_failures"))
        self.workers_ready = Gauge("drkernel_warm_workers_ready", "Spare worker processes started and "
                                   "waiting for a candidate", registry=r)
        self.workers_ready.set_function(lambda: service.grader_stat("ready_total"))


class GradingService:
    """Job store + cache + bounded queue + consumers around one grader (built by ``grader_factory``).

    ``base_config`` is the EvalConfig the grader was built with: request ``options`` are validated
    and resolved against it, and the resolved config goes into the cache key.
    """

    def __init__(self, grader_factory: Callable[[], Any], *, base_config: EvalConfig | None = None,
                 store: JobStore | None = None, cache: ResultCache | None = None,
                 settings: ServiceSettings | None = None):
        self.grader_factory = grader_factory
        self.base_config = (base_config or EvalConfig()).validate()
        self.store = store or JobStore()
        self.cache = cache
        self.settings = settings or ServiceSettings()
        self.version = grader_version()
        self.runtime: dict[str, Any] | None = None
        """torch/Triton/CUDA versions and device model (:func:`runtime_identity`), set by ``start``."""
        self.metrics = _Metrics(self)
        self.grader: Any = None
        self.capacity = 1
        self.running = 0
        self.warm = False
        self.warmup_error: str | None = None
        self._queue: asyncio.Queue[str] | None = None
        self._pending: set[str] = set()          # accepted, not yet answered (queued, running, following)
        self._leaders: dict[str, str] = {}        # cache key -> the job queued or running for it
        self._followers: dict[str, list[str]] = {}  # leader job id -> identical jobs waiting on it
        self._beside: dict[str, bool] = {}        # running job id -> another evaluation ran beside it
        self._waiters: dict[str, list[asyncio.Future]] = {}
        self._latencies: deque[float] = deque(maxlen=200)
        self._tasks: list[asyncio.Task] = []
        self._restart_lock = asyncio.Lock()

    # -- lifecycle ------------------------------------------------------------------------------
    async def start(self) -> None:
        self.grader = await asyncio.to_thread(self.grader_factory)
        self.capacity = max(1, int(self.grader.capacity))
        devices = getattr(self.grader, "devices", None) or (self.base_config.device,)
        self.runtime = await asyncio.to_thread(runtime_identity, tuple(devices))
        log.info("runtime %s, grader %s", self.runtime, self.version)
        self._queue = asyncio.Queue()
        recovered = self.store.unfinished()
        for job in recovered:
            try:
                key = self._key_of(job.request)
            except (TypeError, ValueError):  # options this version no longer takes: the job fails when run
                key = job.key
            if key != job.key:  # accepted under another grader version or runtime: cache it under this one
                self.store.rekey(job.id, key)
                job.key = key
            self._accept(job)
        if recovered:
            self.metrics.recovered.inc(len(recovered))
            log.info("re-queued %d unanswered job(s) from %s", len(recovered), self.store.path)
        self._tasks = [asyncio.create_task(self._consume(), name=f"grade-{i}") for i in range(self.capacity)]
        if self.settings.warmup:
            self._tasks.append(asyncio.create_task(self._warmup(), name="warmup"))
        else:
            self.warm = True

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        if self.grader is not None:
            await asyncio.to_thread(self.grader.close)

    def grader_stat(self, name: str) -> float:
        """A counter of the grader's worker pool (``LocalGrader.pool``), 0 when it has none."""
        value = getattr(getattr(self.grader, "pool", None), name, 0)
        return float(value) if isinstance(value, (int, float)) else 0.0

    @property
    def queue_depth(self) -> int:
        return max(0, len(self._pending) - self.running)

    @property
    def ready(self) -> bool:
        grader_ready = getattr(self.grader, "ready", None)
        if callable(grader_ready) and not grader_ready():
            return False
        return self.warm and self.grader is not None

    async def _warmup(self) -> None:
        """Grade the conformance probe once: proves the grader works and warms its caches."""
        from drkernel.env.conformance import HONEST, PROBE_TASK

        options = {"measure_performance": False, "profile": False, "trials_per_distribution": 1,
                   "distributions": ["native"], "determinism_check": False}
        try:
            result = await self.grader.agrade(Task.from_source(PROBE_TASK, name="warmup"), HONEST, seed=0,
                                              options=options)
            if result.passed:
                self.warm = True
                log.info("warm: probe kernel graded in the grader")
            else:
                self.warmup_error = f"probe kernel did not pass: {result.error and result.error.message}"
        except Exception as exc:  # noqa: BLE001 - reported through /healthz
            self.warmup_error = f"{type(exc).__name__}: {exc}"
        if self.warmup_error:
            log.error("warm-up failed: %s", self.warmup_error)

    # -- submission -----------------------------------------------------------------------------
    def resolve(self, req: EvaluateRequest) -> tuple[dict[str, Any], str]:
        """Validated options and the cache key; HTTPException 400 naming a bad option."""
        options = dict(req.options or {})
        unknown = sorted(set(options) - _CONFIG_FIELDS)
        if unknown:
            raise HTTPException(400, f"options: unknown EvalConfig field(s) {unknown}; known: {sorted(_CONFIG_FIELDS)}")
        fixed = sorted(set(options) & set(_FIXED_OPTIONS))
        if fixed:
            raise HTTPException(400, f"options: {fixed[0]!r} cannot be set per request ({_FIXED_OPTIONS[fixed[0]]})")
        if req.entry_point != self.base_config.entry_point:
            options["entry_point"] = req.entry_point  # the static checks look for <entry_point>New
        try:
            config = self.base_config.with_overrides(**options).validate()
        except (TypeError, ValueError) as exc:
            raise HTTPException(400, f"options: {exc}") from exc
        return options, self._key(req.task_code, req.entry_point, req.candidate_code, req.seed, config)

    def _key(self, task_code: str, entry_point: str, candidate_code: str, seed: int | None,
             config: EvalConfig) -> str:
        assert self.runtime is not None, "the service is not started"
        return cache_key(task_code, entry_point, candidate_code, seed, config_dict(config), self.version, self.runtime)

    def _key_of(self, request: dict[str, Any]) -> str:
        """The cache key of a stored request (its options were validated when it was accepted)."""
        config = self.base_config.with_overrides(**request["options"]).validate()
        return self._key(request["task_code"], request["entry_point"], request["candidate_code"], request["seed"],
                         config)

    def submit(self, req: EvaluateRequest) -> tuple[Job, bool]:
        """Accept one request; returns ``(job, created)``. Runs in the event loop without awaiting, so
        the checks and the insert are one atomic step."""
        options, key = self.resolve(req)
        job_id = req.id or uuid.uuid4().hex
        request = {"task_code": req.task_code, "candidate_code": req.candidate_code, "seed": req.seed,
                   "options": options, "task_name": req.task_name, "entry_point": req.entry_point}
        existing = self.store.get(job_id)
        if existing is not None:
            if existing.key != key:
                if existing.request != request:
                    raise HTTPException(409, f"job id {job_id!r} already exists with a different request; "
                                             f"use a new id")
                self.store.rekey(job_id, key)  # the same request, accepted before an upgrade or a move
                existing.key = key
            if existing.state == FAILED and (existing.error or {}).get("status") == 503:
                self.store.requeue(job_id)  # a client retrying an environment failure
                existing = self.store.get(job_id)
                self._accept(existing)
            return existing, False
        hit = self.cache.get(key) if self.cache is not None else None
        if hit is None and len(self._pending) >= self.capacity + self.settings.max_queue:
            self.metrics.rejected.labels("429").inc()
            raise HTTPException(429, f"queue full ({len(self._pending)} jobs accepted, limit "
                                     f"{self.capacity + self.settings.max_queue}); retry later",
                                headers={"Retry-After": str(self.retry_after())})
        try:
            job, created = self.store.submit(job_id, key, request)
        except JobConflict as exc:
            raise HTTPException(409, str(exc)) from exc
        if hit is not None:
            self.store.finish(job_id, hit, cached=True)
            self.metrics.cache_hits.inc()
            self.metrics.evaluations.labels(verdict_label(EvalResult.from_dict(decode_result(hit)))).inc()
            return self.store.get(job_id), created
        self._accept(job)
        return job, created

    def has_room(self) -> bool:
        """Whether a new job would be accepted now (not answered 429)."""
        return len(self._pending) < self.capacity + self.settings.max_queue

    def retry_after(self) -> int:
        """Seconds until a slot is likely free: mean latency x jobs ahead / capacity, in [1, 60]."""
        mean = sum(self._latencies) / len(self._latencies) if self._latencies else 5.0
        ahead = max(1, len(self._pending) - self.capacity + 1)
        return int(min(60, max(1, math.ceil(mean * ahead / self.capacity))))

    def _accept(self, job: Job, *, follow: bool = True) -> None:
        """Queue a non-terminal job, or attach it to an identical one already queued or running.
        ``follow=False`` queues it on its own (an identical job's outcome was transient)."""
        if job.id in self._pending:
            return
        self._pending.add(job.id)
        leader = self._leaders.get(job.key)
        if follow and leader is not None:
            self._followers[leader].append(job.id)
            return
        if leader is None:
            self._leaders[job.key] = job.id
        self._followers[job.id] = []
        assert self._queue is not None
        self._queue.put_nowait(job.id)

    # -- waiting --------------------------------------------------------------------------------
    async def wait(self, job_id: str, timeout: float | None) -> Job | None:
        """The job once terminal, or as it is after ``timeout`` seconds (None: wait for the answer)."""
        job = self.store.get(job_id)
        if job is None or job.terminal or timeout == 0:
            return job
        fut = asyncio.get_running_loop().create_future()
        self._waiters.setdefault(job_id, []).append(fut)
        try:
            job = self.store.get(job_id)  # answered between the read and the registration?
            if job is not None and not job.terminal:
                await asyncio.wait_for(asyncio.shield(fut), timeout)
        except asyncio.TimeoutError:
            pass
        finally:
            waiters = self._waiters.get(job_id, [])
            if fut in waiters:
                waiters.remove(fut)
            if not waiters:
                self._waiters.pop(job_id, None)
        return self.store.get(job_id)

    def _notify(self, job_id: str) -> None:
        self._pending.discard(job_id)
        for fut in self._waiters.pop(job_id, []):
            if not fut.done():
                fut.set_result(None)

    # -- grading --------------------------------------------------------------------------------
    async def _consume(self) -> None:
        assert self._queue is not None
        while True:
            job_id = await self._queue.get()
            try:
                await self._run(job_id)
            except asyncio.CancelledError:
                raise
            except Exception:  # noqa: BLE001 - one job's bug must not stop the consumer
                log.exception("job %s: unexpected error", job_id)
                job = self.store.get(job_id)
                if job is not None:
                    self._complete(job, None, (503, "environment_failure", "internal error in the service"))

    async def _run(self, job_id: str) -> None:
        job = self.store.get(job_id)
        if job is None:
            self._pending.discard(job_id)
            return
        if job.terminal:  # answered already (e.g. by an earlier run of it): hand its answer on
            error = (job.error["status"], job.error["type"], job.error["message"]) if job.error else None
            self._complete(job, EvalResult.from_dict(decode_result(job.result)) if job.result else None, error)
            return
        if job.attempts >= self.settings.max_attempts:
            self._complete(job, None, (503, "environment_failure",
                                       f"evaluation started {job.attempts} times without an answer "
                                       f"(the server died each time); not retried again"))
            return
        self.store.mark_running(job_id)
        req = job.request
        task = Task.from_source(req["task_code"], name=req["task_name"], entry_point=req["entry_point"])
        timeouts = 0
        for retry in range(self.settings.transient_retries + 1):
            result, error, beside = await self._timed_grade(job_id, task, req)
            reason = transient_reason(result) if result is not None else None
            if reason is None or retry == self.settings.transient_retries:
                break
            if reason == "timeout":  # alone, it is the kernel's hang; beside others, maybe load: once
                timeouts += 1
                if not beside or timeouts > 1:
                    break
            log.info("job %s: transient outcome (%s); evaluating it again", job_id, reason)
            self.metrics.transient_retries.labels(reason).inc()
            if reason == "worker_died":
                await asyncio.sleep(self.settings.worker_died_backoff_s * 2 ** retry)
        if result is not None:
            try:  # what cannot be sent is a grader bug, answered 503 (retried), never stored as done
                json.dumps(encode_result(result.to_dict()), allow_nan=False)
            except (TypeError, ValueError) as exc:
                log.exception("job %s: the result cannot be encoded as JSON", job_id)
                result, error = None, (503, "environment_failure", f"the grader's result is not JSON: {exc}")
        self._complete(job, result, error)

    async def _timed_grade(self, job_id: str, task: Task, req: dict[str, Any]) -> tuple[EvalResult | None,
                                                                                           tuple | None, bool]:
        """One :meth:`_grade`, timed; the last value says whether another evaluation ran beside it."""
        for other in self._beside:
            self._beside[other] = True
        self._beside[job_id] = bool(self._beside)
        self.running += 1
        t0 = time.monotonic()
        try:
            result, error = await self._grade(task, req)
        finally:
            self.running -= 1
            beside = self._beside.pop(job_id, True)
        if result is not None:
            elapsed = time.monotonic() - t0
            self._latencies.append(elapsed)
            self.metrics.latency.observe(elapsed)
        return result, error, beside

    async def _grade(self, task: Task, req: dict[str, Any]) -> tuple[EvalResult | None, tuple | None]:
        """One evaluation; an environment failure restarts the grader and is retried once."""
        for attempt in range(2):
            grader = self.grader
            try:
                result = await grader.agrade(task, req["candidate_code"], seed=req["seed"], options=req["options"])
                return result, None
            except TaskError as exc:
                return None, (422, "task_error", str(exc))
            except Exception as exc:  # noqa: BLE001 - EnvironmentFailure or a grader bug: never a verdict
                kind = "EnvironmentFailure" if isinstance(exc, EnvironmentFailure) else type(exc).__name__
                message = f"{kind}: {exc}"
                log.warning("grader failed (%s); %s", message, "restarting it" if attempt == 0 else "giving up")
                if attempt == 0:
                    await self._restart_grader(grader)
        return None, (503, "environment_failure", message)

    async def _restart_grader(self, failed: Any) -> None:
        async with self._restart_lock:
            if self.grader is not failed:  # another consumer restarted it already
                return
            self.metrics.restarts.inc()
            try:
                await asyncio.to_thread(failed.close)
            except Exception:  # noqa: BLE001
                log.exception("closing the failed grader")
            self.grader = await asyncio.to_thread(self.grader_factory)

    def _complete(self, job: Job, result: EvalResult | None, error: tuple | None) -> None:
        """Store the one answer of ``job`` and of every identical job that followed it (a transient
        outcome is not theirs: they are queued again, each on its own)."""
        followers = self._followers.pop(job.id, [])
        if self._leaders.get(job.key) == job.id:
            del self._leaders[job.key]
        if result is not None:
            data = result.to_dict()
            reason = transient_reason(data)
            if self.store.finish(job.id, data):
                self.metrics.evaluations.labels(verdict_label(result)).inc()
                if reason is not None:
                    self.metrics.transient_answers.labels(reason).inc()
            if reason is not None:
                for fid in followers:
                    self._pending.discard(fid)
                    follower = self.store.get(fid)
                    if follower is not None and not follower.terminal:
                        self._accept(follower, follow=False)
                followers = []
            elif self.cache is not None:
                self.cache.put(job.key, data)
            for fid in followers:
                if self.store.finish(fid, data, cached=True):
                    self.metrics.cache_hits.inc()
                    self.metrics.evaluations.labels(verdict_label(result)).inc()
        elif error is not None:
            status, kind, message = error
            for jid in [job.id, *followers]:
                if self.store.fail(jid, status=status, kind=kind, message=message):
                    self.metrics.evaluations.labels(kind).inc()
        for jid in [job.id, *followers]:
            self._notify(jid)


# ---------------------------------------------------------------------------------------------
# HTTP
# ---------------------------------------------------------------------------------------------

def create_app(service: GradingService) -> FastAPI:
    """The FastAPI app serving ``service`` (its lifespan starts and stops the service)."""
    from contextlib import asynccontextmanager

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        await service.start()
        try:
            yield
        finally:
            await service.stop()

    app = FastAPI(title="drkernel grading service", version=service.version, lifespan=lifespan)
    app.state.service = service
    settings = service.settings

    @app.exception_handler(RequestValidationError)
    async def bad_parameter(request: Request, exc: RequestValidationError) -> JSONResponse:
        """Malformed query/path parameters are 400 (422 means an unusable task in this API)."""
        problems = "; ".join(f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in exc.errors())
        service.metrics.rejected.labels("400").inc()
        return JSONResponse({"detail": f"malformed request: {problems}"}, status_code=400)

    def authorize(request: Request) -> None:
        if not settings.token:
            return
        header = request.headers.get("authorization", "")
        scheme, _, given = header.partition(" ")
        if scheme.lower() != "bearer" or not given:
            service.metrics.rejected.labels("401").inc()
            raise HTTPException(401, "missing bearer token (send 'Authorization: Bearer <token>')",
                                headers={"WWW-Authenticate": "Bearer"})
        if not hmac.compare_digest(given.strip().encode(), settings.token.encode()):
            service.metrics.rejected.labels("401").inc()
            raise HTTPException(401, "wrong bearer token", headers={"WWW-Authenticate": "Bearer"})

    async def read_json(request: Request, limit: int) -> dict[str, Any]:
        """The body as a JSON object, read with a size cap (413) and parsed (400)."""
        declared = request.headers.get("content-length")
        if declared is not None and declared.isdigit() and int(declared) > limit:
            raise _reject(service, 413, f"request body is {int(declared)} bytes; the limit is {limit}")
        body = bytearray()
        async for chunk in request.stream():
            body += chunk
            if len(body) > limit:
                raise _reject(service, 413, f"request body exceeds the limit of {limit} bytes")
        try:
            data = json.loads(body)
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise _reject(service, 400, f"body is not valid JSON: {exc}") from exc
        if not isinstance(data, dict):
            raise _reject(service, 400, f"body must be a JSON object, got {type(data).__name__}")
        return data

    async def read_request(request: Request) -> EvaluateRequest:
        data = await read_json(request, settings.max_body_bytes)
        try:
            req = EvaluateRequest.model_validate(data)
        except ValidationError as exc:
            problems = "; ".join(f"{'.'.join(str(p) for p in e['loc']) or 'body'}: {e['msg']}" for e in exc.errors())
            raise _reject(service, 400, f"malformed request: {problems}") from exc
        check_request(req)
        return req

    def check_request(req: EvaluateRequest) -> None:
        """The checks every submission passes (sizes 413, id and entry point 400, task parses 422)."""
        for name in ("task_code", "candidate_code"):
            n = len(getattr(req, name))
            if n > settings.max_code_chars:
                raise _reject(service, 413, f"{name} is {n} characters; the limit is {settings.max_code_chars}")
        if req.id is not None and not _ID_RE.match(req.id):
            raise _reject(service, 400, "id must be 1-128 characters of letters, digits and . _ : -")
        if not req.entry_point.isidentifier():
            raise _reject(service, 400, f"entry_point must be a Python identifier, got {req.entry_point!r}")
        try:
            compile(req.task_code, f"<task {req.task_name}>", "exec")
        except (SyntaxError, ValueError) as exc:
            raise _reject(service, 422, f"task_code cannot be used: it does not parse: {exc}") from exc

    @app.get("/healthz")
    async def healthz() -> JSONResponse:
        body = {"ready": service.ready, "version": service.version, "device": service.base_config.device,
                "capacity": service.capacity, "queue_depth": service.queue_depth, "running": service.running}
        if not service.ready:
            body["reason"] = service.warmup_error or "warming up"
        return JSONResponse(body, status_code=200 if service.ready else 503)

    @app.post("/v1/evaluate", dependencies=[Depends(authorize)])
    async def evaluate(request: Request) -> JSONResponse:
        req = await read_request(request)
        job, _ = service.submit(req)
        job = await service.wait(job.id, None)
        assert job is not None
        headers = {"X-Job-Id": job.id, "X-Drkernel-Cached": str(job.cached).lower()}
        if job.state == DONE:
            return JSONResponse({**job.result, **_answer_flags(job)}, headers=headers)
        error = job.error or {"status": 503, "type": "environment_failure", "message": "no answer"}
        return JSONResponse({"detail": error["message"], "type": error["type"]}, status_code=error["status"],
                            headers=headers)

    @app.post("/v1/jobs", dependencies=[Depends(authorize)])
    async def submit_job(request: Request) -> JSONResponse:
        req = await read_request(request)
        job, created = service.submit(req)
        return JSONResponse(_job_body(job), status_code=202 if created else 200)

    @app.get("/v1/jobs/{job_id}", dependencies=[Depends(authorize)])
    async def get_job(job_id: str, wait: float = Query(0.0, ge=0.0)) -> JSONResponse:
        job = await service.wait(job_id, min(wait, settings.max_wait_s))
        if job is None:
            raise HTTPException(404, f"no job with id {job_id!r}")
        return JSONResponse(_job_body(job))

    def authorize_reward(request: Request) -> None:
        """The bearer token, or ``?token=`` in the URL: OpenRLHF sends no header of its own."""
        if settings.token and "authorization" not in request.headers:
            given = request.query_params.get("token", "")
            if not given:
                service.metrics.rejected.labels("401").inc()
                raise HTTPException(401, "missing token (send 'Authorization: Bearer <token>' or put "
                                         "'?token=<token>' in the --remote_rm_url)",
                                    headers={"WWW-Authenticate": "Bearer"})
            if not hmac.compare_digest(given.encode(), settings.token.encode()):
                service.metrics.rejected.labels("401").inc()
                raise HTTPException(401, "wrong token", headers={"WWW-Authenticate": "Bearer"})
            return
        authorize(request)

    async def openrlhf_reward(request: Request) -> JSONResponse:
        """OpenRLHF's remote reward model (:mod:`drkernel.serve.openrlhf`): one job per sample with
        a kernel, under an id derived from the request, through the same checks, cache, queue and
        store as ``/v1/evaluate``."""
        from drkernel.serve import openrlhf

        authorize_reward(request)
        data = await read_json(request, settings.max_reward_body_bytes)
        try:
            batch = openrlhf.parse_batch(data)
        except ValueError as exc:
            raise _reject(service, 400, str(exc)) from exc
        if len(batch.samples) > settings.max_reward_batch:
            raise _reject(service, 413, f"{len(batch.samples)} samples; the limit is {settings.max_reward_batch}")
        requests: list[EvaluateRequest | None] = []
        for sample in batch.samples:
            if sample.code is None:
                requests.append(None)
                continue
            label = sample.label
            fields_ = {"task_code": label.task_code, "candidate_code": sample.code, "seed": label.seed,
                       "options": {**batch.options, **label.options} or None, "task_name": label.task_name,
                       "entry_point": label.entry_point}
            try:
                req = EvaluateRequest.model_validate({**fields_, "id": openrlhf.job_id(fields_)})
                check_request(req)
                service.resolve(req)  # a bad option is this request's fault: 400 before any job exists
            except ValidationError as exc:
                raise _reject(service, 400, f"sample {sample.index}: {exc.errors()[0]['msg']}") from exc
            except HTTPException as exc:
                raise HTTPException(exc.status_code, f"sample {sample.index}: {exc.detail}") from exc
            requests.append(req)
        jobs: list[str | None] = []
        for req in requests:
            if req is None:
                jobs.append(None)
                continue
            while not service.has_room():  # back-pressure inside the batch: earlier samples drain the queue
                await asyncio.sleep(0.05)
            jobs.append(service.submit(req)[0].id)
        answered = await asyncio.gather(*(service.wait(j, None) if j else _none() for j in jobs))
        results: list[EvalResult | None] = []
        for sample, job in zip(batch.samples, answered):
            if job is None:
                results.append(None)
            elif job.state == DONE:
                results.append(EvalResult.from_dict(decode_result(job.result)))
            else:
                error = job.error or {"status": 503, "type": "environment_failure", "message": "no answer"}
                return JSONResponse({"detail": f"sample {sample.index}: {error['message']}", "type": error["type"],
                                     "sample": sample.index}, status_code=error["status"])
        cached = [bool(job is not None and job.cached) for job in answered]
        return JSONResponse(openrlhf.answer(batch, results, cached, jobs))

    from drkernel.serve.openrlhf import ROUTES

    for path in ROUTES:
        app.add_api_route(path, openrlhf_reward, methods=["POST"])

    @app.get("/metrics", dependencies=[Depends(authorize)])
    async def metrics() -> Response:
        return Response(generate_latest(service.metrics.registry), media_type=CONTENT_TYPE_LATEST)

    return app


async def _none() -> None:
    return None


def _answer_flags(job: Job) -> dict[str, Any]:
    """``cached``: answered from the cache or a concurrent identical job, not its own evaluation;
    ``transient``: why the answer was not cached (None for a verdict on the candidate)."""
    return {"cached": job.cached, "transient": transient_reason(job.result) if job.result else None}


def _job_body(job: Job) -> dict[str, Any]:
    return {**job.to_dict(), "transient": _answer_flags(job)["transient"]}


def _reject(service: GradingService, status: int, message: str) -> HTTPException:
    service.metrics.rejected.labels(str(status)).inc()
    return HTTPException(status, message)


__all__ = ["GradingService", "ServiceSettings", "EvaluateRequest", "create_app", "verdict_label"]
