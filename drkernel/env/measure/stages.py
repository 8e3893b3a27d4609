"""The evaluation's measuring stages: the reference's time, the timed calls, and where the work ran.

``launch_flags_cpu(ev)`` judges the CPU interpreter's launch counts after the correctness calls.
With the GPU held exclusively: ``reference_process`` and ``time_reference`` (cached, or measured
now in a clean worker, :mod:`~drkernel.env.tasks.reference_timing`), ``timed_calls`` (warm-up and
timed calls; which outputs are kept is decided after each call). Then ``records`` (the worker's
device records), ``timing`` (the records' findings, the spot checks of the kept outputs,
``spot_check``, and the times) and ``attribute`` (coverage, own launches, host copies and side
streams per call, :mod:`~drkernel.env.measure.attribution`).

``ev`` is the :class:`~drkernel.env.evaluation.Evaluation` that runs the stage (imported for the
annotations only: at run time the evaluation imports its stages, never the other way).
"""

from __future__ import annotations

import os
import statistics
import time
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from drkernel.env.device import release_if_short
from drkernel.env.judge import stages as judge
from drkernel.env.measure import gpu_clock
from drkernel.env.measure.attribution import (CallWindow, ForgedRecords, coverage_of, cut_windows, own_outside_windows,
                                              top_kernels)
from drkernel.env.measure.gate import Lease
from drkernel.env.measure.profiling import UNBOUNDED
from drkernel.env.measure.spot import CHECK_ALL_TIMED, sample_size
from drkernel.env.measure.timing import WORKER_PHASES
from drkernel.env.process.sandbox import CandidateProcess
from drkernel.env.process.tensor_io import TensorIOError, read_tensor
from drkernel.env.protocol import EventsRequest, TimeRequest
from drkernel.env.result import Stage, Stop
from drkernel.env.tasks import reference_timing

if TYPE_CHECKING:  # (annotations only: at run time the evaluation imports its stages, not the other way)
    from drkernel.env.evaluation import Evaluation


def launch_flags_cpu(ev: Evaluation) -> None:
    """On the CPU interpreter, launches are counted in the worker (on a GPU: the device records)."""
    runs = ev.run_replies
    if ev.cuda or not runs:
        return
    counts = [r.launches for r in runs]
    if all(c == 0 for c in counts):
        ev.finding("no_triton_launch", "no checked call launched one of your kernels")
    elif any(c == 0 for c in counts):
        ev.finding("launch_inconsistent", f"own launches per checked call: {counts}")


def reference_process(ev: Evaluation) -> CandidateProcess | None:
    """A worker for the reference's timing when none is cached (started outside the GPU's
    exclusive section, so a cold start does not hold other evaluations' timing)."""
    if reference_timing.lookup(ev.prepared, ev.config) is not None:
        return None
    t0 = time.monotonic()
    with ev.clock.part("process_start"):
        proc = ev.acquire_fn(ev.device, max(120.0, ev.config.load_timeout_s))
    ev.deadline += time.monotonic() - t0
    ev.cancel.on_cancel(proc.kill)
    return proc


def time_reference(ev: Evaluation, proc: CandidateProcess | None) -> Any:
    ref = reference_timing.lookup(ev.prepared, ev.config)
    if ref is not None:
        if proc is not None:
            ev.release_fn(proc)
        ev.result.details["reference_cached"] = True
        return ref
    if proc is None:
        proc = ev.acquire_fn(ev.device, max(120.0, ev.config.load_timeout_s))
    with ev.clock.part("reference_timing"):
        ref = reference_timing.measure(ev.prepared, ev.config, proc, hold_verdict=ev.budget_verdict,
                                         release=ev.release_fn)
    ev.deadline += ref.seconds  # the reference's time is the grader's, not the candidate's
    reference_timing.store(ev.prepared, ev.config, ref)
    ev.result.details["reference_cached"] = False
    return ref


def timed_calls(ev: Evaluation, lease: Lease | None) -> Any:
    """The warm-up and timed calls; after the last one has returned (its device work is done),
    the GPU is downgraded to shared for the rest of the request (kept outputs copied back): no
    other timing overlaps it, other evaluations' shared work may. The profiler runs on: its
    records are read after the gate is let go (:func:`records`)."""
    plan, cfg = ev.plan, ev.config
    rng = np.random.default_rng(int.from_bytes(os.urandom(8), "little"))  # never derived from the seed
    kept: dict[int, tuple[int, int]] = {}  # checked call -> (seed, size) of the elements read back
    size = sample_size(ev.refs[("trial", 0)].out.numel(), cfg.spot_sample)
    last = cfg.warmup + cfg.timing_trials - 1
    # With a handful of timed calls a cheap wrong output on a majority of them moves the median,
    # and a random sample of one or two misses that often: then every timed output is checked.
    every = cfg.timing_trials <= CHECK_ALL_TIMED

    asked: list[int] = []

    def keep(call: int) -> tuple[int, int] | None:
        """Decided after the call returned: the candidate cannot know which calls are checked,
        nor, before its call is over, which elements of the output are read."""
        asked.append(call)
        if ev.cuda and call == last and len(ev.clock_samples) < 2:  # once (a worker may ask again)
            ev.clock_samples.append(gpu_clock.sample(ev.device))
        if call == last and lease is not None:
            lease.downgrade()
        if call < cfg.warmup or call > last or call in kept:
            return None
        if every or (len(kept) < cfg.spot_checks and (rng.random() < cfg.spot_rate or (call == last and not kept))):
            kept[call] = (int(rng.integers(0, 1 << 63)), size)
            return kept[call]
        return None

    reply = ev.request(TimeRequest(seeds=plan.seeds, factors=plan.factors, warmup=cfg.warmup,
                                   reload_seeds=plan.reloads, spot=True, launch_budget_ms=cfg.launch_budget_ms,
                                   records=False),
                       cfg.timing_timeout_s, "timing", on_spot=keep)
    ev.calls += len(plan.seeds)
    ev.kept = kept
    if asked != list(range(cfg.warmup, last + 1)):
        # every timed call is followed by its question, in order: a worker that skips them
        # (its harness's code replaced) would have no timed output checked
        ev.finding("harness_tampered", f"the worker asked about {len(asked)} of {last + 1 - cfg.warmup} "
                                       "timed calls' outputs")
        ev.fail(Stage.TIMING, "the timed calls' outputs were not offered for checking")
        raise Stop
    return reply.body


def records(ev: Evaluation, stage: Stage) -> Any:
    """The worker's device records (CUDA; None on the CPU), read outside the GPU gate: the
    worker stops its profiler through C functions bound before the candidate loaded, and
    converts and checks (host work; its last request ended with the device synchronised, and
    the checks read nothing the candidate can replace: ``StateGuard``, the seal). A failure is
    the ``stage``'s the records belong to (the timing's, after one)."""
    if not ev.cuda:
        return None
    return ev.request(EventsRequest(), ev.config.call_timeout_s, "profiling", gated=False,
                      stage=stage).body.events


def timing(ev: Evaluation, t: Any, ref: Any, events: Any) -> None:
    """The device records' findings about where the work ran (before the spot checks: a call
    that left work on another stream, or deferred it past its window, fails them, and says
    why), the spot checks of the kept outputs, then the candidate's and the reference's times."""
    plan, cfg = ev.plan, ev.config
    if ev.cuda:
        try:
            ev.windows = cut_windows(events, ev.calls, plan.kernel_suffix)
            where_work_ran(ev, ev.windows, events)
        except ForgedRecords as exc:
            ev.finding("harness_tampered", f"device records: {exc}")
            ev.fail(Stage.TIMING, f"the device records of the calls are inconsistent: {exc}")
            raise Stop from None
    with ev.clock.part("transfers"):
        returned = {item.get("call") for item in t.spot if isinstance(item, dict)}
        if returned != set(ev.kept) or len(t.spot) != len(ev.kept):
            ev.finding("timed_output_mismatch", "the kept timed outputs did not all come back")
            ev.fail(Stage.TIMING, "the outputs of the checked timed calls did not all come back")
            raise Stop
        reads = any(item.get("out") is not None for item in t.spot)
        if reads:
            # one model under the evaluation's init seed for every checked call, copied per call
            # on the device: the references' (built on the CPU outside the GPU gate if gone)
            with ev.clock.part("spot_reference"):
                ev.prepared.prebuild(plan.init_seed)
        with ev.shared():  # one section, each check one piece (a waiting timing runs between two)
            pristine = ev.prepared.template(plan.init_seed) if reads else None
            for k, item in enumerate(t.spot):
                if k:
                    ev.step_aside()
                spot_check(ev, item, pristine)
            if ev.cuda:
                release_if_short(ev.device)
    if ev.cuda:
        timed = ev.windows[ev.calls - cfg.timing_trials:]
        cand = [w.time_ns / 1e6 for w in timed]
    else:
        cand = list(t.host_ms[cfg.warmup:])
        if t.calls_without_launch:  # (on a GPU the device records decide, in attribute)
            ev.finding("launch_inconsistent", f"{t.calls_without_launch} timed calls launched no kernel of yours")
    if len(cand) != cfg.timing_trials or not cand:
        ev.fail(Stage.TIMING, f"the timing returned {len(cand)} of {cfg.timing_trials} calls")
        raise Stop
    r = ev.result
    r.kernel_ms = statistics.median(cand)
    r.reference_ms = ref.median_ms
    r.speedup = r.reference_ms / r.kernel_ms if r.kernel_ms > 0 else None
    from drkernel.env.measure.timing import summarize

    r.details["timing"] = {
        "candidate_ms": summarize(cand), "reference": ref.describe(), "host_ms": summarize(list(t.host_ms[cfg.warmup:])),
        "launch_ms": summarize(list(t.launch_ms[cfg.warmup:])), "trials": cfg.timing_trials, "warmup": cfg.warmup,
        "reference_backend": cfg.reference_backend, "launch_budget": t.launch_budget,
        "samples": {"candidate": cand, "reference": ref.times_ms}, "checked_calls": sorted(ev.kept),
        "persisting_l2_reset": t.persisting_l2_reset,
        "worker_phases_s": {k: float(t.phases_s[k]) for k in WORKER_PHASES if k in t.phases_s},
        **({"sm_clock": ev.clock_samples} if any(ev.clock_samples) else {}),
        "method": "device records between fences" if ev.cuda else "host clock (CPU interpreter)",
    }
    if not ev.cuda:
        ev.cpu_foreign = list(t.foreign[cfg.warmup:])
    if r.speedup is not None and r.speedup > 10.0:
        r.details["excessive_speedup"] = True  # a review flag, not a verdict (pattern #25)
    ev.completed.add(Stage.TIMING)


def spot_check(ev: Evaluation, item: dict[str, Any], pristine: torch.nn.Module | None) -> None:
    """One kept timed output against the reference on the same inputs and parameters."""
    plan = ev.plan
    call = item["call"]
    key, reload = plan.timed_key(call)
    ok, msg = False, "timed call returned no readable tensor"
    if item.get("out") is not None:
        try:
            with ev.clock.part("spot_reference"):
                spot = ev.prepared.reference(plan.init_seed, key, reload, ev.buffers, cache=False,
                                             pristine=pristine)
            with ev.clock.part("spot_read"):
                got = read_tensor(item["out"], ev.proc.workdir, spot.out.device, ev.output_stage())
            with ev.clock.part("spot_compare"):
                cmp = judge.compare_spot(ev, got, item.get("shape"), spot, ev.kept[call])
            ok, msg = cmp.ok, cmp.message
        except (TensorIOError, OSError) as exc:
            msg = str(exc)
    if not ok:
        ev.finding("timed_output_mismatch", f"timed call {call}: {msg[:120]}")
        ev.fail(Stage.TIMING, f"output of timed call {call} is wrong: {msg}")
        raise Stop


def attribute(ev: Evaluation, events: Any) -> None:
    """Coverage, own launches, host transfers and side streams of every call (see
    :mod:`drkernel.env.measure.attribution`); work outside own kernels below ``min_coverage`` is a verdict."""
    r, cfg = ev.result, ev.config
    if ev.cuda:
        windows = ev.windows  # (with a timing, its records' findings were made then: timing)
        if windows is None:
            try:
                windows = cut_windows(events, ev.calls, ev.plan.kernel_suffix)
                where_work_ran(ev, windows, events)
            except ForgedRecords as exc:
                ev.finding("harness_tampered", f"device records: {exc}")
                ev.fail(Stage.PROFILING, f"the device records of the calls are inconsistent: {exc}")
                return
        own = [w.own_launches for w in windows]
        if windows and all(c == 0 for c in own):
            ev.finding("no_triton_launch", "no call ran one of your kernels on the device")
        elif any(c == 0 for c in own):
            ev.finding("launch_inconsistent", f"calls without an own kernel: {own.count(0)} of {len(own)}")
        host = [w for w in windows if w.dtoh_ns > max(20_000, 0.05 * w.time_ns)]
        if host:
            ev.finding("host_compute", f"device-to-host copies in {len(host)} of {len(windows)} calls "
                                       f"(up to {max(w.dtoh_ns for w in host) / 1e3:.0f} us)")
        coverage = coverage_of(windows)
        top = top_kernels(windows, ev.plan.kernel_suffix)
        r.details["profile"] = {"method": "cuda_profiler", "top": top, "calls": len(windows),
                                "own_us": sum(w.own_ns for w in windows) / max(len(windows), 1) / 1e3,
                                "total_us": sum(w.device_ns for w in windows) / max(len(windows), 1) / 1e3}
        coverage = bounded_by_reference(ev, coverage, windows)
        others = ", ".join(f"{t['name'][:60]} ({t['us']:.1f} us)" for t in top if not t["own"])[:400]
    else:
        # Every call must meet the bar, the worst one decides: a call that does its work in torch
        # is not made good by others that did not (a candidate that counts its calls can tell
        # the correctness trials from the timed ones; the cost of a call is exact, not noisy).
        costs = [x.foreign for x in ev.run_replies] + list(getattr(ev, "cpu_foreign", []))
        per_call = max(costs) if costs else 0.0
        ref_cost = ev.ref_cost
        coverage = 1.0 - min(1.0, per_call / ref_cost) if ref_cost > 0 else (1.0 if per_call == 0 else 0.0)
        r.details["profile"] = {"method": "cpu_dispatch", "torch_cost_per_call": per_call,
                                "torch_cost_median": statistics.median(costs) if costs else 0.0,
                                "reference_cost": ref_cost}
        if per_call >= UNBOUNDED:
            others = ("a torch operator whose work cannot be bounded by its bytes (a fused library kernel, "
                      "linear algebra, a bilinear form) ran outside your kernels: write that work in Triton")
        else:
            others = f"torch operators outside your kernels cost about {per_call / max(ref_cost, 1e-9):.0%} " \
                     "of the reference's own work" if per_call else ""
    r.coverage = None if coverage is None else float(min(max(coverage, 0.0), 1.0))
    if r.coverage is not None and r.coverage < cfg.min_coverage and r.error is None:
        outside = (r.details.get("profile") or {}).get("outside_vs_reference")
        ev.fail(Stage.PROFILING, f"only {100 * r.coverage:.0f}% of the forward's work is in your own Triton "
                f"kernels (at least {100 * cfg.min_coverage:.0f}% is required)"
                + (f"; the work outside them takes {100 * outside:.0f}% of the reference's whole time"
                   if outside is not None and 1.0 - outside <= r.coverage + 1e-9 else "")
                + (f"; the rest: {others}" if others else ""))


def bounded_by_reference(ev: Evaluation, coverage: float | None, windows: list[CallWindow]) -> float | None:
    """Coverage that idle time cannot buy: at most ``1 - outside / reference``, the device time
    a timed call spends outside the candidate's own kernels (median over the timed calls)
    against the reference's whole time. The share of the candidate's own time alone grows with
    anything its kernels do, a spin on the GPU's clock or a sleep included, while cuBLAS does the
    work; the reference's time is not the candidate's to inflate. For a kernel faster than the
    reference the bound is above its share and changes nothing."""
    ref_ms, n = ev.result.reference_ms, ev.config.timing_trials
    if coverage is None or not ref_ms or ev.result.kernel_ms is None or len(windows) < n:
        return coverage
    outside_ms = statistics.median((w.device_ns - w.own_ns) / 1e6 for w in windows[-n:])
    bound = 1.0 - min(1.0, max(outside_ms, 0.0) / ref_ms)
    ev.result.details["profile"].update({"outside_ms": outside_ms, "outside_vs_reference": outside_ms / ref_ms,
                                         "own_share": coverage})
    return min(coverage, bound)


def where_work_ran(ev: Evaluation, windows: list[CallWindow], events: Any) -> None:
    """Findings of the device records: work on other streams than the calls' (``side_stream``),
    own kernels between the calls (``work_outside_call``). Raises ForgedRecords."""
    side = [w for w in windows if w.other_stream_ns > 0]
    if side:
        ev.finding("side_stream", f"work on other streams in {len(side)} of {len(windows)} calls")
    n_out, ns_out = own_outside_windows(events, ev.calls, ev.plan.kernel_suffix)
    if n_out:
        ev.finding("work_outside_call", f"{n_out} launches of your kernels ({ns_out / 1e3:.0f} us) ran "
                                        "between calls, outside every call's window")
