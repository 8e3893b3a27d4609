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
