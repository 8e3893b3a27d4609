"""Who may use one GPU while evaluations run concurrently: :class:`DeviceGate`.

Shared work (loading, compiling, correctness calls, the grader's references and comparisons) runs
for many evaluations at once; exclusive work (the timed calls) runs alone, so one timed region per
GPU sees nothing else of ours. An evaluation's timing ends with work that must not overlap another
timing but need not run alone (its worker copies the kept outputs back): the
holder *downgrades* to shared there (:meth:`Lease.downgrade`): the next timing waits for that
copy; shared work of other evaluations may run beside it when no timing waits (writer preference
holds throughout: admitting shared work beside a downgraded holder while a timing waited made no
difference to throughput on an H100, 55.6 vs 55.4 evaluations/min at capacity 8).

    with gate.exclusive() as lease:      # waits for running shared work, then runs alone
        ...timed calls...
        lease.downgrade()                # from here on: one shared holder among others
        ...copy outputs back...
"""

from __future__ import annotations

import contextlib
import threading
import time
from typing import Callable, Iterator

STATES = ("exclusive", "drain", "handover", "shared", "idle")
"""What :meth:`DeviceGate.occupancy` splits the wall time into: a timing runs (``exclusive``); a
timing waits for shared work still running (``drain``: nobody new may start); a timing may start
but its thread has not woken yet (``handover``); shared work runs and no timing waits
(``shared``); nobody holds or waits for the gate (``idle``: the GPU has none of our work)."""


class Lease:
    """The exclusive side of a :class:`DeviceGate` held by one thread (``downgrade()`` once)."""

    def __init__(self, gate: "DeviceGate"):
        self._gate = gate
        self.downgraded = False

    def downgrade(self) -> None:
        """Become a shared holder at once (no other timing can start in between); idempotent."""
        if not self.downgraded:
            self._gate._downgrade()
            self.downgraded = True


class DeviceGate:
    """A readers-writer lock over one GPU, with writer preference and downgrade (module docstring).

    Once a timing waits, new shared work waits behind it, and the timing starts as soon as the
    shared requests in flight return. Shared work is taken per request, so a timing waits at most
    one request per concurrent evaluation. A thread that holds either side may enter the shared side
    again (it already owns the GPU: its own comparisons inside a timing, or after a downgrade).
    ``check`` is called while waiting (cancellation raises through it).
    """

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._cond = threading.Condition()
        self._readers: dict[int, int] = {}  # thread id -> shared holds (re-entrant)
        self._writer: int | None = None
        self._waiting_writers = 0
        self._since = clock()
        self._state = "idle"
        self._seconds = dict.fromkeys(STATES, 0.0)
        self._reader_seconds = 0.0  # the integral of the number of shared holders over time
        self._holders = 0  # shared holders since the last state change
        self._downgraded: set[int] = set()  # shared holders that are a timing's downgraded tail
        self._released: set[int] = set()  # threads whose step aside was cancelled (hold already given back)

    @contextlib.contextmanager
    def shared(self, check: Callable[[], None] | None = None) -> Iterator[None]:
        me = threading.get_ident()
        with self._cond:
            as_writer = self._writer == me  # the exclusive holder: nothing to take or give back
            if as_writer:
                pass
            elif me in self._readers:
                self._readers[me] += 1
            else:
                while self._writer is not None or self._waiting_writers:
                    self._cond.wait(0.2)
                    if check:
                        check()
                self._readers[me] = 1
                self._mark()
        try:
            yield
        finally:
            if not as_writer:
                self._release_reader(me)

    @contextlib.contextmanager
    def exclusive(self, check: Callable[[], None] | None = None) -> Iterator[Lease]:
        me = threading.get_ident()
        with self._cond:
            if me in self._readers or self._writer == me:
                raise RuntimeError("DeviceGate.exclusive: this thread already holds the gate")
            self._waiting_writers += 1
            self._mark()
            try:
                while self._writer is not None or self._readers:
                    self._cond.wait(0.2)
                    if check:
                        check()
                self._writer = me
            finally:
                self._waiting_writers -= 1
                self._mark()
        lease = Lease(self)
        try:
            yield lease
        finally:
            if lease.downgraded:
                self._release_reader(me)
            else:
                with self._cond:
                    self._writer = None
                    self._mark()
                    self._cond.notify_all()

    def step_aside(self, check: Callable[[], None] | None = None) -> bool:
        """For a thread holding the shared side once (not re-entrantly, not as a downgraded
        timing): when a timing waits, give the shared side back, wait until no timing runs or
        waits, and take it again; True when it stepped aside. Long shared work calls this between
        its pieces (no GPU work of its own in flight), so a timing waits for one piece, not for
        the whole of it."""
        me = threading.get_ident()
        with self._cond:
            if (not self._waiting_writers or self._writer == me or self._readers.get(me) != 1
                    or me in self._downgraded):  # (a downgraded timing's tail must end before the next timing)
                return False
            del self._readers[me]
            self._mark()
            self._cond.notify_all()
            try:
                while self._writer is not None or self._waiting_writers:
                    self._cond.wait(0.2)
                    if check:
                        check()
            except BaseException:
                self._released.add(me)  # holds nothing now: the caller's shared() has nothing to give back
                raise
            self._readers[me] = 1
            self._mark()
        return True

    def occupancy(self) -> dict[str, float]:
        """Seconds spent in each of :data:`STATES` since the gate was made, and
        ``shared_holders_s`` (threads holding the shared side, integrated over time: divided by the
        ``shared`` and ``drain`` seconds, the mean number of concurrent shared holders). Subtract two
        snapshots for an interval."""
        with self._cond:
            self._mark()
            return {**self._seconds, "shared_holders_s": self._reader_seconds}

    def _mark(self) -> None:
        """Close the interval since the last state change (called under the condition's lock)."""
        now = self._clock()
        dt = now - self._since
        self._seconds[self._state] += dt
        self._reader_seconds += dt * self._holders
        self._since = now
        self._holders = len(self._readers)
        if self._writer is not None:
            self._state = "exclusive"
        elif self._waiting_writers:
            self._state = "drain" if self._readers else "handover"
        else:
            self._state = "shared" if self._readers else "idle"

    @property
    def busy(self) -> bool:
        """Whether anyone holds the gate (diagnostics and tests)."""
        return self._writer is not None or bool(self._readers)

    def _downgrade(self) -> None:
        me = threading.get_ident()
        with self._cond:
            if self._writer != me:
                raise RuntimeError("DeviceGate: only the exclusive holder may downgrade")
            self._writer = None
            self._readers[me] = 1
            self._downgraded.add(me)
            self._mark()
            self._cond.notify_all()  # shared work may start (unless a timing waits); timings wait for this reader

    def _release_reader(self, me: int) -> None:
        with self._cond:
            if me in self._released:  # a step aside ended by cancellation gave the hold back already
                self._released.discard(me)
                return
            self._readers[me] -= 1
            if not self._readers[me]:
                del self._readers[me]
                self._downgraded.discard(me)
                self._mark()
            self._cond.notify_all()


_GATES: dict[str, DeviceGate] = {}
_GATES_GUARD = threading.Lock()


def device_gate(device: str) -> DeviceGate | None:
    """The process-wide gate of a GPU (None on CPU: CPU timings run concurrently, one core each)."""
    if not device.startswith("cuda"):
        return None
    with _GATES_GUARD:
        return _GATES.setdefault(device, DeviceGate())


__all__ = ["DeviceGate", "Lease", "device_gate"]
