"""The GPU gate: a timing runs alone; after its downgrade, shared work may run beside the rest of its
request, and the next timing still waits for it (drkernel.env.gate)."""

from __future__ import annotations

import threading
import time

import pytest

from drkernel.env.gate import DeviceGate


def _logger():
    log, lock = [], threading.Lock()

    def add(item):
        with lock:
            log.append(item)

    return log, add


def test_after_a_downgrade_shared_work_runs_beside_it_and_the_next_timing_waits():
    gate = DeviceGate()
    log, add = _logger()
    downgraded, release = threading.Event(), threading.Event()

    def first_timing():
        with gate.exclusive() as lease:
            add("A+")
            lease.downgrade()
            add("A-down")
            downgraded.set()
            with gate.shared():  # its own shared work after the downgrade: re-entrant, no deadlock
                release.wait(5)
            add("A-")

    def shared_work():
        with gate.shared():
            add("S")

    def second_timing():
        with gate.exclusive():
            add("B")

    a = threading.Thread(target=first_timing)
    a.start()
    assert downgraded.wait(5)
    s = threading.Thread(target=shared_work)
    s.start()  # no timing waits: shared work runs beside the downgraded holder
    s.join(5)
    assert not s.is_alive() and log == ["A+", "A-down", "S"]
    b = threading.Thread(target=second_timing)
    b.start()
    time.sleep(0.1)
    assert "B" not in log  # the next timing waits for the downgraded holder
    release.set()
    for t in (a, b):
        t.join(5)
    assert log == ["A+", "A-down", "S", "A-", "B"]
    assert not gate.busy


def test_without_a_downgrade_waiting_timing_keeps_writer_preference():
    gate = DeviceGate()
    log, add = _logger()
    go = threading.Event()

    def holder():
        with gate.shared():
            go.wait(5)
            add("H-")

    def timing():
        with gate.exclusive():
            add("X")

    def late():
        with gate.shared():
            add("L")

    h = threading.Thread(target=holder)
    h.start()
    time.sleep(0.03)
    x = threading.Thread(target=timing)
    x.start()
    time.sleep(0.03)
    lt = threading.Thread(target=late)
    lt.start()
    time.sleep(0.05)
    assert log == []  # the late shared request queues behind the waiting timing
    go.set()
    for t in (h, x, lt):
        t.join(5)
    assert log == ["H-", "X", "L"]


def test_misuse_is_refused():
    gate = DeviceGate()
    with gate.shared():
        with pytest.raises(RuntimeError, match="already holds"):
            with gate.exclusive():
                pass
    with gate.exclusive() as lease:
        lease.downgrade()
        lease.downgrade()  # idempotent
    assert not gate.busy


def test_an_evaluation_downgrades_after_its_last_timed_call_and_leaves_the_gate_free():
    """The timing request's tail (kept outputs copied back, profiler stopped) runs downgraded."""
    from pathlib import Path

    from drkernel.env.config import EvalConfig, cpu_fast
    from drkernel.env.evaluation import Evaluation, as_task
    from drkernel.env.gate import Lease
    from drkernel.env.prepared import PreparedTask

    fixtures = Path(__file__).parent / "fixtures"
    config = cpu_fast(EvalConfig(device="cpu"))
    prepared = PreparedTask.prepare(as_task(fixtures / "tasks" / "relu.py"), config.resolved_task_size(), "cpu")
    downgrades = []
    original = Lease.downgrade

    def spy(self):
        downgrades.append(self.downgraded)
        original(self)

    gate = DeviceGate()
    Lease.downgrade = spy
    try:
        r = Evaluation(prepared, (fixtures / "candidates" / "honest" / "relu_basic.py").read_text(), seed=1,
                       config=config, gate=gate).run()
    finally:
        Lease.downgrade = original
    assert r.correct, r.error
    assert downgrades == [False]  # once, at the last timed call
    assert not gate.busy
