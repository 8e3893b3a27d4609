"""The ``Grader`` protocol: the one interface every caller of the kernel environment programs against.

The agent loop, test-time scaling, the local trainer, verl's agent loop and the HTTP service all
grade kernels through these three methods, so a local grader, a Ray pool and a remote HTTP grader
are interchangeable::

    grader = LocalGrader(EvalConfig(device="cpu"))
    result = grader.grade(task, source, seed=0)                # blocking
    result = await grader.agrade(task, source, seed=0)         # from an event loop; never blocks it
    grader.close()                                             # or: with LocalGrader(...) as grader

* ``task`` is a :class:`~drkernel.env.tasks.task.Task` (build one with ``Task.from_file`` or
  ``Task.from_source``); ``source`` is always candidate *source text* (model output), never a path.
* ``options`` overrides :class:`~drkernel.env.config.EvalConfig` fields for this one evaluation
  (e.g. ``{"measure_performance": False}``); it must be JSON-serialisable, because remote graders
  send it over the wire.
* A bad kernel is an :class:`~drkernel.env.result.EvalResult`; an unusable task raises
  :class:`~drkernel.env.tasks.task.TaskError`; a broken grader raises
  :class:`~drkernel.env.result.EnvironmentFailure` (callers retry or surface it, never reward it).
* ``capacity`` is how many evaluations the grader usefully runs at once; callers bound their
  concurrency by it.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Iterator, Mapping, Protocol, runtime_checkable

from drkernel.env.config import EvalConfig
from drkernel.env.result import EvalResult
from drkernel.env.tasks.task import Task

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
        """Grade without blocking the event loop. Cancelling the awaiting task cancels the
        evaluation (for LocalGrader: its candidate's process group is killed)."""
        self._check(task, source, options)
        from drkernel.env.evaluation import CancelToken

        token = CancelToken()
        fut = self._threads.submit(self._grade_cancellable, task, source, seed, dict(options or {}), token)
        wrapped = asyncio.wrap_future(fut)
        try:
            return await asyncio.shield(wrapped)
        except asyncio.CancelledError:
            token.cancel()
            fut.cancel()
            wrapped.add_done_callback(lambda f: f.cancelled() or f.exception())  # retrieved: no warning
            raise

    def _grade(self, task: Task, source: str, *, seed: int | None, options: dict[str, Any]) -> EvalResult:
        raise NotImplementedError

    def _grade_cancellable(self, task: Task, source: str, seed: int | None, options: dict[str, Any],
                           token: Any) -> EvalResult:
        """``_grade`` with a :class:`~drkernel.env.evaluation.CancelToken`; subclasses that can stop
        an evaluation midway override this (the default ignores the token)."""
        return self._grade(task, source, seed=seed, options=options)

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


def _gpu_count() -> int:
    import torch

    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def _out_of_gpu_memory(result: EvalResult) -> bool:
    """Whether the candidate's evaluation failed because the GPU's memory ran out."""
    message = result.error.message if result.error is not None else ""
    return "OutOfMemoryError" in message or "CUDA out of memory" in message


class LocalGrader(GraderBase):
    """Grades on this machine, each candidate in its own isolated process, started ahead of time.

    * **Warm processes**: ``spares`` worker processes per device are kept started (torch, triton
      and the CUDA context imported/created); each serves one candidate and is discarded.
    * **Per-GPU scheduling**: on CUDA, evaluations are spread over ``devices`` (default: every
      visible GPU, least busy first); up to ``per_gpu`` candidates of one GPU load, compile and
      run their correctness trials at once, while timing and profiling hold the GPU's gate
      exclusively (one timed region per GPU, nothing else of this grader on that GPU meanwhile;
      :class:`~drkernel.env.measure.gate.DeviceGate`). On CPU, ``capacity`` defaults to the core count.
    * **Memory contention is not a verdict**: the candidates of one GPU share its memory, so a
      candidate that runs out of GPU memory while others ran beside it is graded again with the GPU
      to itself (new evaluations wait, running ones finish); that verdict stands and
      ``details["retried_alone"]`` keeps the first error (an honest batched-matmul kernel failed a
      trial with CUDA OOM beside the red-team corpus's memory-hungry candidates).
    * **Cached references**: a task is loaded once and its reference outputs per seed are reused
      across candidates (``cache_tasks`` tasks, ``ref_cache_bytes`` of outputs per task, kept on
      the evaluation device: at most ``cache_tasks * ref_cache_bytes``, 8 GiB by default).

    ``config`` is the base protocol; per-call ``options`` override its fields (not ``device``).
    ``grade`` calls beyond ``capacity`` wait for a free slot. ``close()`` waits for evaluations in
    flight, then stops the spares.
    """

    def __init__(self, config: EvalConfig | None = None, *, capacity: int | None = None,
                 devices: list[str] | None = None, spares: int | None = None, per_gpu: int = 6,
                 warm: bool = True, cache_tasks: int = 8, ref_cache_bytes: int = 1 << 30):
        from drkernel.env.device import resolve_device
        from drkernel.env.tasks.prepared import PreparedCache
        from drkernel.env.process.sandbox import WarmPool

        self.config = (config or EvalConfig()).validate()
        if devices is None:
            if self.config.device == "cpu":
                devices = ["cpu"]
            elif self.config.device == "cuda":
                resolve_device("cuda")  # EnvironmentFailure without CUDA
                devices = [f"cuda:{i}" for i in range(max(1, _gpu_count()))]
            else:
                devices = [resolve_device(self.config.device)]
        self.devices = list(devices)
        cores = os.cpu_count() or 1
        if capacity is None:
            capacity = cores if self.devices == ["cpu"] else max(1, min(cores, per_gpu)) * len(self.devices)
        super().__init__(capacity)
        self.warm = warm
        per_device = -(-capacity // len(self.devices))
        # Each process serves one candidate, so processes must start as fast as evaluations end: a
        # GPU worker takes ~5-6 s to start (CUPTI's first session alone ~4.4-5.6 s on an H100; 1, 8
        # or 16 starting at once take as long each: tests/benchmarks/diagnostics/cupti_start.py), so
        # twice the per-device concurrency is kept ready, up to 16 on a GPU (~0.5 GB of GPU memory
        # each for its context; with 8 at capacity 8 evaluations waited 2.4 s each for a process,
        # with 16 none) and 8 on the CPU.
        default_spares = min(2 * per_device, 8 if self.devices == ["cpu"] else 16)
        self.pool = WarmPool(spares=(spares if spares is not None else default_spares) if warm else 0)
        self.prepared = PreparedCache(max_tasks=cache_tasks, cache_bytes=ref_cache_bytes)
        self._slots = threading.BoundedSemaphore(capacity)
        self._active = {d: 0 for d in self.devices}
        self._started = {d: 0 for d in self.devices}
        self._solo_wanted = {d: 0 for d in self.devices}
        self._solo_running = {d: False for d in self.devices}
        self._active_lock = threading.Lock()
        self._device_free = threading.Condition(self._active_lock)
        self.solo_retries = 0
        """Evaluations graded again alone after running out of GPU memory beside others."""
        if warm:
            for d in self.devices:
                self.pool.prewarm(d)

    def _grade(self, task: Task, source: str, *, seed: int | None, options: dict[str, Any]) -> EvalResult:
        return self._grade_cancellable(task, source, seed, options, None)

    def _grade_cancellable(self, task: Task, source: str, seed: int | None, options: dict[str, Any],
                           token: Any) -> EvalResult:
        from drkernel.env.evaluation import CancelToken, Evaluation
        from drkernel.env.measure.gate import device_gate
        from drkernel.env.process.sandbox import fresh_process

        if "device" in options and options["device"] != self.config.device:
            raise ValueError(f"options cannot change the device of a LocalGrader ({self.config.device})")
        config = self.config.with_overrides(**options).validate() if options else self.config
        token = token or CancelToken()
        while not self._slots.acquire(timeout=0.2):
            if token.cancelled:
                from drkernel.env.evaluation import EvaluationCancelled

                raise EvaluationCancelled("cancelled while waiting for a slot")
        try:
            with self._device_free:
                while True:
                    open_ = [d for d in self.devices if not self._solo_wanted[d] and not self._solo_running[d]]
                    if open_:
                        break
                    self._wait_device(token)
                device = min(open_, key=lambda d: self._active[d])
                crowded = self._active[device] > 0
                self._active[device] += 1
                self._started[device] += 1
                started = self._started[device]
            try:
                prepared = self.prepared.get(task, config.resolved_task_size(), device)
                acquire = self.pool.acquire if self.warm else fresh_process

                def run() -> EvalResult:
                    return Evaluation(prepared, source, seed=seed, config=config, acquire=acquire,
                                      gate=device_gate(device), cancel=token, release=self.pool.discard).run()

                result = run()
                with self._active_lock:
                    crowded = crowded or self._started[device] != started
                if crowded and device.startswith("cuda") and _out_of_gpu_memory(result):
                    # Device memory is shared by the candidates of one GPU: an out-of-memory beside
                    # others may be theirs, not this candidate's. Grade it again with the GPU to itself;
                    # that verdict stands (a candidate that needs more than the GPU fails alone too).
                    first = result.error.message[:300]
                    with self._alone(device, token):
                        result = run()
                    self.solo_retries += 1
                    result.details["retried_alone"] = {"first_error": first}
                return result
            finally:
                with self._device_free:
                    self._active[device] -= 1
                    self._device_free.notify_all()
        finally:
            self._slots.release()

    def _wait_device(self, token: Any) -> None:
        """Wait (holding ``_device_free``) for a change of the devices' state; raises when cancelled."""
        if token.cancelled:
            from drkernel.env.evaluation import EvaluationCancelled

            raise EvaluationCancelled("cancelled while waiting for the device")
        self._device_free.wait(0.2)

    @contextlib.contextmanager
    def _alone(self, device: str, token: Any) -> Iterator[None]:
        """Hold ``device`` with no other evaluation of this grader on it: new ones wait, running ones
        finish first. The caller is counted active; it is not while it waits (two evaluations that
        both want the device alone take turns)."""
        with self._device_free:
            self._active[device] -= 1
            self._solo_wanted[device] += 1
            self._device_free.notify_all()
            try:
                while self._solo_running[device] or self._active[device] > 0:
                    self._wait_device(token)
            except BaseException:
                self._solo_wanted[device] -= 1
                self._active[device] += 1
                self._device_free.notify_all()
                raise
            self._solo_wanted[device] -= 1
            self._solo_running[device] = True
            self._active[device] += 1
        try:
            yield
        finally:
            with self._device_free:
                self._solo_running[device] = False
                self._device_free.notify_all()

    def close(self) -> None:
        super().close()
        self.pool.close()
        self.prepared.clear()


__all__ = ["Grader", "GraderBase", "LocalGrader", "Options"]
