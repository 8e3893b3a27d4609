"""Many gradings from synchronous code: what the TRL reward (and any other batch caller) shares.

``BatchGrader(grader).grade_many(items)`` grades ``(task, source, seed, options)`` items through
one :class:`~drkernel.env.grader.Grader` and returns their results in order:

* **Concurrency** as in the agent (:class:`drkernel.agent.episode.Limits`): at most
  ``grader.capacity`` gradings in flight, each through ``await grader.agrade(...)`` (the grader's
  own threads, processes or HTTP client), never more.
* **One event loop** of its own, in a daemon thread, started on first use: ``grade_many`` works
  from plain code and from code that already runs a loop (TRL calls reward functions from its
  training loop; a notebook runs one), and an HTTP grader's client always sees the same loop.
* **Identical items are graded once**: a result is kept (the last ``memo_size``) under its
  (task, entry point, source, seed, options), and a second request for an item in flight waits for
  the first. TRL calls each reward function on the same completions, so the components of one
  step (correct, speedup, coverage, hack) cost one grading per completion, not four.
* **Failures** are never rewards: an :class:`~drkernel.env.result.EnvironmentFailure` or a
  :class:`~drkernel.env.tasks.task.TaskError` raised by one grading is raised by ``grade_many`` (after
  the others finished), and is not remembered.
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from drkernel.env.result import EvalResult
    from drkernel.env.tasks.task import Task


@dataclass(frozen=True)
class GradeItem:
    """One grading: the task, the candidate's source, the hidden seed and EvalConfig overrides."""

    task: "Task"
    source: str
    seed: int | None = None
    options: Mapping[str, Any] = field(default_factory=dict)

    def key(self) -> tuple:
        return (self.task.source, self.task.entry_point, self.task.name, self.source, self.seed,
                json.dumps(dict(self.options), sort_keys=True, default=str))


class BatchGrader:
    """Grades batches of items through ``grader`` (see the module doc). Does not own ``grader``:
    :meth:`close` stops only this object's event loop."""

    def __init__(self, grader: Any, *, concurrency: int | None = None, memo_size: int = 4096):
        if not hasattr(grader, "agrade") or not hasattr(grader, "capacity"):
            raise TypeError(f"grader must implement drkernel.env.grader.Grader (capacity, agrade), "
                            f"got {type(grader).__name__}")
        self.grader = grader
        self.concurrency = max(1, int(concurrency if concurrency is not None else grader.capacity))
        self.memo_size = memo_size
        self._memo: OrderedDict[tuple, "EvalResult"] = OrderedDict()
        self._inflight: dict[tuple, asyncio.Future] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._limit: asyncio.Semaphore | None = None
        self._lock = threading.Lock()
        self.gradings = 0
        """Gradings started (items answered from the memo or an identical item in flight excluded)."""

    # -- the private loop ------------------------------------------------------------------------
    def _ensure_loop(self) -> asyncio.AbstractEventLoop:
        with self._lock:
            if self._loop is None:
                loop = asyncio.new_event_loop()
                thread = threading.Thread(target=loop.run_forever, name="drkernel-batch-grader", daemon=True)
                thread.start()
                self._loop, self._thread = loop, thread
            return self._loop

    def grade_many(self, items: Sequence[GradeItem]) -> list["EvalResult"]:
        """Results of ``items``, in order (blocking; callable from any thread)."""
        if not items:
            return []
        loop = self._ensure_loop()
        return asyncio.run_coroutine_threadsafe(self._grade_all(list(items)), loop).result()

    async def agrade_many(self, items: Sequence[GradeItem]) -> list["EvalResult"]:
        """:meth:`grade_many` for a caller inside an event loop (awaits without blocking it)."""
        if not items:
            return []
        loop = self._ensure_loop()
        return await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(self._grade_all(list(items)), loop))

    # -- on the private loop ---------------------------------------------------------------------
    async def _grade_all(self, items: list[GradeItem]) -> list["EvalResult"]:
        if self._limit is None:
            self._limit = asyncio.Semaphore(self.concurrency)
        outcomes = await asyncio.gather(*(self._grade_one(item) for item in items), return_exceptions=True)
        for outcome in outcomes:
            if isinstance(outcome, BaseException):
                raise outcome
        return list(outcomes)

    async def _grade_one(self, item: GradeItem) -> "EvalResult":
        key = item.key()
        if key in self._memo:
            self._memo.move_to_end(key)
            return self._memo[key]
        if key in self._inflight:
            return await asyncio.shield(self._inflight[key])
        future = asyncio.get_running_loop().create_future()
        self._inflight[key] = future
        try:
            assert self._limit is not None
            async with self._limit:  # at most `capacity` gradings in flight, as in the agent
                self.gradings += 1
                result = await self.grader.agrade(item.task, item.source, seed=item.seed,
                                                  options=dict(item.options) or None)
        except BaseException as exc:
            future.set_exception(exc)
            future.exception()  # retrieved: no "never retrieved" warning when nobody else waits
            raise
        finally:
            self._inflight.pop(key, None)
        future.set_result(result)
        self._memo[key] = result
        while len(self._memo) > self.memo_size:
            self._memo.popitem(last=False)
        return result

    def close(self) -> None:
        """Stop the private event loop (idempotent). The grader stays open: its owner closes it."""
        with self._lock:
            loop, thread, self._loop, self._thread = self._loop, self._thread, None, None
        if loop is not None:
            loop.call_soon_threadsafe(loop.stop)
            if thread is not None:
                thread.join(timeout=10)
            loop.close()
        self._limit = None


__all__ = ["BatchGrader", "GradeItem"]
