"""Executor backends: who runs evaluations, and how many at once.

Every backend registers by name and passes one conformance suite, :func:`check_executor`.

* ``local`` — one evaluation at a time, each in a fresh candidate process (``evaluate``).
* ``pool`` — several at once, each in its own candidate process. On CUDA, jobs are spread over
  the given GPUs with one evaluation per GPU at a time, so timings never share a device.
"""

from __future__ import annotations

import os
import threading
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, replace
from queue import Queue
from typing import Any, Callable, Iterable, Iterator

from drkernel.env.config import EvalConfig
from drkernel.env.evaluation import evaluate
from drkernel.env.result import EvalResult
from drkernel.env.task import Task

_EXECUTORS: dict[str, type] = {}


def register_executor(name: str) -> Callable[[type], type]:
    def deco(cls: type) -> type:
        if name in _EXECUTORS and _EXECUTORS[name] is not cls:
            raise ValueError(f"executor {name!r} is already registered to {_EXECUTORS[name].__name__}")
        _EXECUTORS[name] = cls
        cls.name = name
        return cls

    return deco


def get_executor(name: str, **kwargs: Any) -> "Executor":
    if name not in _EXECUTORS:
        raise KeyError(f"unknown executor {name!r}; known: {sorted(_EXECUTORS)}")
    return _EXECUTORS[name](**kwargs)


def list_executors() -> list[str]:
    return sorted(_EXECUTORS)


@dataclass
class Job:
    """One evaluation to run: a task, a candidate (source or path) and its seed."""

    task: Task | str
    candidate: str
    seed: int | None = None
    key: Any = None


class Executor:
    """Base class: ``evaluate`` one candidate, ``map`` many (results in completion order)."""

    name = "base"

    def __init__(self, config: EvalConfig | None = None):
        self.config = (config or EvalConfig()).validate()

    def evaluate(self, task: Task | str, candidate: str, *, seed: int | None = None,
                 config: EvalConfig | None = None) -> EvalResult:
        return evaluate(task, candidate, seed=seed, config=config or self.config)

    def map(self, jobs: Iterable[Job], return_exceptions: bool = False) -> Iterator[tuple[Job, Any]]:
        """Yield ``(job, EvalResult)``; with ``return_exceptions`` an environment failure of one job is
        yielded as ``(job, exception)`` instead of ending the iteration."""
        for job in jobs:
            try:
                yield job, self.evaluate(job.task, job.candidate, seed=job.seed)
            except Exception as exc:  # noqa: BLE001
                if not return_exceptions:
                    raise
                yield job, exc

    def close(self) -> None:
        """Idempotent."""

    def __enter__(self) -> "Executor":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


@register_executor("local")
class LocalExecutor(Executor):
    """Sequential: one fresh candidate process per evaluation."""


@register_executor("pool")
class PoolExecutor(Executor):
    """Concurrent evaluations, each in its own candidate process.

    ``workers`` defaults to the CPU count on ``cpu`` and to the number of ``devices`` on CUDA
    (``devices`` defaults to every visible GPU), so two timings never share a GPU.
    """

    def __init__(self, config: EvalConfig | None = None, workers: int | None = None,
                 devices: list[str] | None = None):
        super().__init__(config)
        if self.config.device.startswith("cuda"):
            if devices is None:
                import torch

                devices = [f"cuda:{i}" for i in range(max(torch.cuda.device_count(), 1))]
            self.devices: list[str] = list(devices)
        else:
            self.devices = ["cpu"] * (workers or max(os.cpu_count() or 1, 1))
        self.workers = len(self.devices) if workers is None else min(workers, len(self.devices))
        self._free: Queue[str] = Queue()
        for d in self.devices[: self.workers]:
            self._free.put(d)
        self._pool = ThreadPoolExecutor(max_workers=self.workers, thread_name_prefix="drkernel-eval")
        self._closed = False
        self._lock = threading.Lock()

    def _run(self, job: Job) -> EvalResult:
        device = self._free.get()
        try:
            cfg = replace(self.config, device=device)
            return evaluate(job.task, job.candidate, seed=job.seed, config=cfg)
        finally:
            self._free.put(device)

    def evaluate(self, task: Task | str, candidate: str, *, seed: int | None = None,
                 config: EvalConfig | None = None) -> EvalResult:
        if config is not None:
            return evaluate(task, candidate, seed=seed, config=config)
        return self._pool.submit(self._run, Job(task, candidate, seed)).result()

    def map(self, jobs: Iterable[Job], return_exceptions: bool = False) -> Iterator[tuple[Job, Any]]:
        pending: dict[Future, Job] = {}
        it = iter(jobs)
        for job in it:
            pending[self._pool.submit(self._run, job)] = job
            if len(pending) >= 2 * self.workers:
                break
        while pending:
            done, _ = wait(pending, return_when=FIRST_COMPLETED)
            for fut in done:
                job = pending.pop(fut)
                exc = fut.exception()
                if exc is not None and not return_exceptions:
                    raise exc
                yield job, exc if exc is not None else fut.result()
                nxt = next(it, None)
                if nxt is not None:
                    pending[self._pool.submit(self._run, nxt)] = nxt

    def close(self) -> None:
        with self._lock:
            if not self._closed:
                self._closed = True
                self._pool.shutdown(wait=True)
