"""Grading a module's parametrized cases ahead of the tests that check them.

A module-scoped fixture submits every *selected* case (``-k``/``-m``/node ids are honoured) to a
warm :class:`~drkernel.env.grader.LocalGrader`, a few at a time and in run order; each test then
waits for its own verdict and checks it. Each case still gets a process of its own and a test
still fails on its own verdict; only the waiting is shared, so on CI's 2 cores two candidates are
graded at once instead of one.
"""

from __future__ import annotations

from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, Callable


def selected_params(request: Any, test_name: str) -> list[dict[str, Any]]:
    """The parameters of this module's selected ``test_name`` items, in the order they run."""
    return [item.callspec.params for item in request.session.items
            if getattr(item, "module", None) is request.module and getattr(item, "originalname", None) == test_name
            and hasattr(item, "callspec")]


class GradedAhead:
    """``submit(key, fn, *args)`` runs ``fn(*args)`` on one of ``workers`` threads (first come,
    first served); ``result(key, fn, *args)`` waits for it and returns what it returned (or
    raises what it raised); a key that was not submitted ahead is submitted then."""

    def __init__(self, workers: int):
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="graded-ahead")
        self._futures: dict[Any, Future] = {}

    def submit(self, key: Any, fn: Callable[..., Any], *args: Any) -> None:
        self._futures[key] = self._pool.submit(fn, *args)

    def result(self, key: Any, fn: Callable[..., Any], *args: Any) -> Any:
        if key not in self._futures:
            self.submit(key, fn, *args)
        return self._futures[key].result()

    def close(self) -> None:
        """Drop what has not started, wait for what has."""
        self._pool.shutdown(wait=True, cancel_futures=True)


def corpus_verdicts(request: Any, root: Any, test_name: str, seed: int | None = None):
    """A generator for a module-scoped fixture over a corpus directory (``tasks/``, ``candidates/``,
    entries with ``candidate`` and ``task`` paths relative to ``root``): the selected ``test_name``
    cases graded ahead on the CPU interpreter by one warm LocalGrader, two at a time; yields
    ``verdict(entry) -> EvalResult``. ``seed``: every hidden seed fixed (None: fresh ones)."""
    from drkernel.env.config import EvalConfig, cpu_fast
    from drkernel.env.grader import LocalGrader
    from drkernel.env.tasks.task import Task

    grader = LocalGrader(cpu_fast(EvalConfig(device="cpu")), capacity=2, spares=1)

    def grade(candidate: str, task: str):
        return grader.grade(Task.from_file(root / task), (root / candidate).read_text(), seed=seed)

    ahead = GradedAhead(workers=2)
    for p in selected_params(request, test_name):
        ahead.submit(p["entry"]["candidate"], grade, p["entry"]["candidate"], p["entry"]["task"])
    try:
        yield lambda e: ahead.result(e["candidate"], grade, e["candidate"], e["task"])
    finally:
        ahead.close()
        grader.close()
