"""The GPU gate: a timing runs alone; after its downgrade, shared work may run beside the rest of its
request, and the next timing still waits for it (drkernel.env.measure.gate)."""

from __future__ import annotations

import threading
import time

import pytest

from drkernel.env.measure.gate import DeviceGate


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
    from drkernel.env.measure.gate import Lease
    from drkernel.env.tasks.prepared import PreparedTask

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


def test_occupancy_splits_the_wall_time_by_who_holds_or_waits_for_the_gate():
    """A fake clock: exclusive 2 s, two shared holders 3 s (6 holder-seconds), a timing waits for
    one of them 1 s (drain), idle 4 s; every second of the 10 is in exactly one state."""
    now = [0.0]
    gate = DeviceGate(clock=lambda: now[0])
    with gate.exclusive():
        now[0] += 2.0
    first, second = threading.Event(), threading.Event()
    holding, waiting = threading.Barrier(3), threading.Event()

    def reader(done: threading.Event):
        with gate.shared():
            holding.wait(5)
            done.wait(5)

    readers = [threading.Thread(target=reader, args=(e,)) for e in (first, second)]
    for t in readers:
        t.start()
    holding.wait(5)  # both hold the shared side
    now[0] += 3.0
    first.set()
    readers[0].join(5)

    def timing():
        with gate.exclusive():
            waiting.set()

    w = threading.Thread(target=timing)
    w.start()
    while not gate._waiting_writers:  # the timing now waits for the second reader
        time.sleep(0.001)
    now[0] += 1.0
    second.set()
    readers[1].join(5)
    w.join(5)
    assert waiting.is_set()
    now[0] += 4.0
    occ = gate.occupancy()
    assert occ["exclusive"] == pytest.approx(2.0)
    assert occ["shared"] == pytest.approx(3.0)
    assert occ["drain"] == pytest.approx(1.0)
    assert occ["idle"] == pytest.approx(4.0)
    assert occ["handover"] == pytest.approx(0.0)
    assert occ["shared_holders_s"] == pytest.approx(2 * 3.0 + 1 * 1.0)
    assert sum(occ[k] for k in ("exclusive", "drain", "handover", "shared", "idle")) == pytest.approx(10.0)


def test_step_aside_lets_a_waiting_timing_run_between_two_pieces_of_shared_work():
    gate = DeviceGate()
    log, add = _logger()
    first_piece, timing_waits = threading.Event(), threading.Event()
    stepped: list[bool] = []

    def long_shared_work():
        with gate.shared():
            add("piece 1")
            first_piece.set()
            timing_waits.wait(5)
            deadline = time.monotonic() + 5
            while not gate._waiting_writers and time.monotonic() < deadline:
                time.sleep(0.001)
            stepped.append(gate.step_aside())  # the timing runs here
            add("piece 2")
            stepped.append(gate.step_aside())  # nobody waits now: keeps the hold

    def timing():
        first_piece.wait(5)
        timing_waits.set()
        with gate.exclusive():
            add("timing")

    threads = [threading.Thread(target=long_shared_work), threading.Thread(target=timing)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(5)
    assert stepped == [True, False]
    assert log == ["piece 1", "timing", "piece 2"]
    assert not gate.busy


def test_a_downgraded_timing_never_steps_aside_and_a_cancelled_step_aside_gives_its_hold_back_once():
    gate = DeviceGate()
    results: dict[str, object] = {}
    downgraded, second_waits, done = threading.Event(), threading.Event(), threading.Event()

    def first_timing():
        with gate.exclusive() as lease:
            lease.downgrade()
            downgraded.set()
            second_waits.wait(5)
            deadline = time.monotonic() + 5
            while not gate._waiting_writers and time.monotonic() < deadline:
                time.sleep(0.001)
            results["downgraded"] = gate.step_aside()  # its tail ends before the next timing
            done.wait(0.1)
        results["after"] = gate.busy

    def second_timing():
        downgraded.wait(5)
        second_waits.set()
        with gate.exclusive():
            results["second ran"] = True

    threads = [threading.Thread(target=first_timing), threading.Thread(target=second_timing)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(5)
    assert results["downgraded"] is False and results["second ran"] is True
    assert not gate.busy

    def cancel():
        raise RuntimeError("cancelled")

    holding, released = threading.Event(), threading.Event()

    def timing():
        holding.wait(5)
        with gate.exclusive():
            released.wait(5)

    t = threading.Thread(target=timing)
    t.start()
    with pytest.raises(RuntimeError, match="cancelled"):
        with gate.shared():
            holding.set()
            while not gate._waiting_writers:
                time.sleep(0.001)
            gate.step_aside(cancel)  # cancelled while the timing runs: holds nothing afterwards
    with gate._cond:
        assert gate._writer is not None and not gate._readers  # the timing runs alone
    released.set()
    t.join(5)
    assert not gate.busy and not gate._released


def test_step_aside_keeps_a_reentrant_hold_and_gives_nothing_back_without_a_timing():
    gate = DeviceGate()
    with gate.shared():
        with gate.shared():  # re-entered: its outer section may have GPU work in flight
            gate._waiting_writers += 1  # (as if a timing waited)
            try:
                assert not gate.step_aside()
            finally:
                gate._waiting_writers -= 1
        assert not gate.step_aside()
    assert not gate.busy


def test_the_stage_clock_counts_time_queued_for_the_gpu_once():
    """A wait for the GPU inside an open part (a timing run between two spot checks) is queueing,
    not the part's work: the part's seconds exclude it."""
    from drkernel.env.evaluation import StageClock

    clock = StageClock()
    t0 = time.monotonic()
    with clock.part("transfers"):
        with clock.part("spot_compare"):
            time.sleep(0.05)
        t1 = time.monotonic()
        time.sleep(0.2)  # (stepped aside for a timing)
        waited = time.monotonic() - t1
        clock.queued(waited)
    wall = time.monotonic() - t0
    assert clock.seconds["gpu_queue"] == round(waited, 4)
    assert clock.seconds["transfers"] == pytest.approx(wall - waited, abs=0.002)
    assert clock.seconds["spot_compare"] >= 0.05
