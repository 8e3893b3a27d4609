"""The ``Grader`` protocol: the one interface every caller of the kernel environment programs against.

The agent loop, test-time scaling, the local trainer, verl's agent loop and the HTTP service all
grade kernels through these three methods, so a local grader, a Ray pool and a remote HTTP grader
are interchangeable::

    grader = LocalGrader(EvalConfig(device="cpu"))
    result = grader.grade(task, source, seed=0)                # blocking
    result = await grader.agrade(task, source, seed=0)         # from an event loop; never blocks it
    grader.close()                                             # or: with LocalGrader(...) as grader

* ``task`` is a :class:`~drkernel.env.task.Task` (build one with ``Task.from_file`` or
  ``Task.from_source``); ``source`` is always candidate *source text* (model output), never a path.
* ``options`` overrides :class:`~drkernel.env.config.EvalConfig` fields for this one evaluation
  (e.g. ``{"measure_performance": False}``); it must be JSON-serialisable, because remote graders
  send it over the wire.
* A bad kernel is an :class:`~drkernel.env.result.EvalResult`; an unusable task raises
  :class:`~drkernel.env.task.TaskError`; a broken grader raises
  :class:`~drkernel.env.result.EnvironmentFailure` (callers retry or surface it, never reward it).
* ``capacity`` is how many evaluations the grader usefully runs at once; callers bound their
  concurrency by it.
"""

from __future__ import annotations

import asyncio
import os
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Mapping, Protocol, runtime_checkable

from drkernel.env.config import EvalConfig
from drkernel.env.result import EvalResult
from drkernel.env.task import Task

Options = Mapping[str, Any]


@runtime_checkable
class Grader(Protocol):
    """Grades candidate kernels. See the module docstring for the contract."""

    @property
    def capacity(self) -> int:
        """Evaluations that run concurrently without queueing."""
        ...

    def grade(self, task: Task, source: str, *, seed: int | None = None,
              options: Options | None = None) -> EvalResult:
        ...

    async def agrade(self, task: Task, source: str, *, seed: int | None = None,
                     options: Options | None = None) -> EvalResult:
        ...

    def close(self) -> None:
        ...


class GraderBase:
    """Shared plumbing: argument checks, context managers, ``agrade`` over a thread pool.

    Subclasses implement :meth:`_grade` (blocking) and may override :meth:`agrade` when they are
    natively asynchronous (an HTTP client, a Ray actor handle).
    """

    def __init__(self, capacity: int = 1):
        if capacity < 1:
            raise ValueError(f"capacity must be >= 1, got {capacity}")
        self._capacity = capacity
        self._threads = ThreadPoolExecutor(max_workers=capacity, thread_name_prefix=type(self).__name__)
        self._closed = False
        self._lock = threading.Lock()

    @property
    def capacity(self) -> int:
        return self._capacity

    def grade(self, task: Task, source: str, *, seed: int | None = None,
              options: Options | None = None) -> EvalResult:
        self._check(task, source, options)
        return self._grade(task, source, seed=seed, options=dict(options or {}))

    async def agrade(self, task: Task, source: str, *, seed: int | None = None,
                     options: Options | None = None) -> EvalResult:
        self._check(task, source, options)
        fut = self._threads.submit(self._grade, task, source, seed=seed, options=dict(options or {}))
        return await asyncio.wrap_future(fut)

    def _grade(self, task: Task, source: str, *, seed: int | None, options: dict[str, Any]) -> EvalResult:
        raise NotImplementedError

    def _check(self, task: Task, source: str, options: Options | None) -> None:
        if self._closed:
            raise RuntimeError(f"{type(self).__name__} is closed")
        if not isinstance(task, Task):
            raise TypeError(f"task must be a drkernel.env.Task (Task.from_file / Task.from_source), "
                            f"got {type(task).__name__}")
        if not isinstance(source, str):
            raise TypeError(f"source must be the candidate's source text (str), got {type(source).__name__}")
        if options is not None and not isinstance(options, Mapping):
            raise TypeError(f"options must be a mapping of EvalConfig fields, got {type(options).__name__}")

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
        self._threads.shutdown(wait=True, cancel_futures=True)

    def __enter__(self) -> "GraderBase":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    async def __aenter__(self) -> "GraderBase":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await asyncio.get_running_loop().run_in_executor(None, self.close)


def _default_capacity(config: EvalConfig) -> int:
    if config.device.startswith("cuda"):
        import torch

        return max(1, torch.cuda.device_count()) if config.device == "cuda" else 1
    return max(1, (os.cpu_count() or 1))


class LocalGrader(GraderBase):
    """Grades on this machine, each candidate in its own fresh, isolated process.

    ``config`` is the base protocol; per-call ``options`` override its fields.
    """

    def __init__(self, config: EvalConfig | None = None, *, capacity: int | None = None):
        self.config = (config or EvalConfig()).validate()
        super().__init__(capacity or _default_capacity(self.config))

    def _grade(self, task: Task, source: str, *, seed: int | None, options: dict[str, Any]) -> EvalResult:
        from drkernel.env.evaluation import evaluate

        config = self.config.with_overrides(**options).validate() if options else self.config
        return evaluate(task, source, seed=seed, config=config)


__all__ = ["Grader", "GraderBase", "LocalGrader", "Options"]
