"""Timing protocol (runs in the candidate's process, driven by the grader).

Reference and candidate run in the same process on the same device, interleaved (the order
alternates every trial), after warm-up. Per timed call:

1. inputs: a fresh device copy of one of ``P`` input sets drawn from hidden seeds, multiplied by a
   per-call factor (a power of two, negated when the task allows) — prepared outside the timed
   region, so a cache keyed on pointers, shapes or values returns a wrong answer;
2. on CUDA: persisting-L2 state is reset (``cudaDeviceSetLimit(cudaLimitPersistingL2CacheSize, 0)``
   and ``cudaCtxResetPersistingL2Cache``, pattern #20), the device is synchronised, and the L2
   cache is flushed by writing a buffer of ``max(2 x L2, 256 MiB)``. The flush is left *in the
   queue* when the call starts (KernelBench's and ``triton.testing.do_bench``'s order): it keeps
   the GPU busy (about 85 us on an H100) while the host runs the call's Python and launch path, so
   the events measure device time rather than the launcher's overhead. A launch path that outlasts
   the flush (two Triton launches: 0.12-0.22 ms) would put the launcher's jitter into the timing
   (~5% between evaluations of one kernel), so the flush is followed by the *launch budget*
   (``launch_budget_ms``, 1 ms by default): a hold kernel that fills every SM
   (:mod:`drkernel.env.budget`, verified by a probe on first use), so the call's launches are queued
   before the start event fires and no kernel on another stream can run beside the hold. Without
   the queued flush and hold, a Triton kernel called from Python (30-50 us per launch) could never
   match an eager op of the same device time (tests/gpu/solution_speed.py);
3. the call is bracketed by CUDA events on the current stream *and* by a host clock around a
   device-wide synchronisation. Work hidden on side streams or threads escapes the events but not
   the host clock: a candidate whose host time exceeds its event time by much more than the
   reference's does is flagged ``side_stream``. The reported time is the larger of the two
   (event time, or host time minus the reference's host-event gap, which holds the flush's
   remainder). The host time of the launch path alone (the call returning, before any
   synchronisation) is reported as ``launch_ms``;
4. every candidate call must launch one of its own Triton kernels, and a few calls chosen by the
   grader have their outputs written back for checking against the reference.

Statistics: median (reported), and the 25th/75th percentiles, min and max as the spread.
"""

from __future__ import annotations

import statistics
import time
from typing import Any

_perf = time.perf_counter
_CUDA_LIMIT_PERSISTING_L2 = 0x06
FLUSH_MIN_BYTES = 256 << 20
"""The L2 flush writes at least this much (KernelBench's 256 MB): long enough on an H100 (~85 us) to
cover a Python-launched kernel's host path, and at least twice any current GPU's L2."""


def persisting_l2_resetter():
    """A function that clears any persisting-L2 carve-out through the CUDA runtime torch loaded.

    The returned function sets ``cudaLimitPersistingL2CacheSize`` to 0 and resets persisting lines
    (``cudaCtxResetPersistingL2Cache``); it returns True when both succeed. It runs before every
    timed call: a candidate could set a carve-out and restore the limit itself, so the reset is
    unconditional (on an H100 it costs the timed call nothing measurable, tests/gpu/l2_reset_cost.py;
    the limit is not 0 at process start there, so a non-zero limit is no evidence of a hack).

    Returns None when no runtime library can be found (then only the flush protects timing).
    """
    import ctypes

    path = None
    try:
        with open("/proc/self/maps") as fh:
            for line in fh:
                if "libcudart" in line:
                    path = line.split()[-1]
                    break
    except OSError:
        return None
    candidates = [path] if path else []
    candidates += ["libcudart.so", "libcudart.so.13", "libcudart.so.12"]
    for name in candidates:
        try:
            lib = ctypes.CDLL(name)
            set_limit, reset = lib.cudaDeviceSetLimit, lib.cudaCtxResetPersistingL2Cache
        except (OSError, AttributeError):
            continue
        set_limit.argtypes = [ctypes.c_int, ctypes.c_size_t]

        def _reset() -> bool:
            return set_limit(_CUDA_LIMIT_PERSISTING_L2, 0) == 0 and reset() == 0

        return _reset
    return None


def _pct(xs: list[float], q: float) -> float:
    s = sorted(xs)
    if not s:
        return float("nan")
    k = (len(s) - 1) * q
    lo, hi = int(k), min(int(k) + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (k - lo)


def summarize(xs: list[float]) -> dict[str, float]:
    return {"median": statistics.median(xs), "p25": _pct(xs, 0.25), "p75": _pct(xs, 0.75),
            "min": min(xs), "max": max(xs), "n": float(len(xs))}


def time_interleaved(h: Any, req: Any) -> Any:
    """Run a :class:`~drkernel.env.protocol.TimeRequest` in the worker; a candidate (or reference)
    call that raises is the candidate's failure at the ``timing`` stage."""
    from drkernel.env.protocol import TimeReply
    from drkernel.env.worker import CandidateError, _trim_traceback

    torch = h.torch
    cuda = h.device.startswith("cuda")
    pool = [h.pool_inputs(s) for s in req.pool_seeds]
    factors: list[float] = list(req.factors)  # one per timed call (and warm-up call)
    trials, warmup = int(req.trials), int(req.warmup)
    spot = set(req.spot)
    flush = None
    if cuda:
        l2 = torch.cuda.get_device_properties(h.device).L2_cache_size or (50 << 20)
        flush = torch.empty(max(2 * l2, FLUSH_MIN_BYTES) // 4, dtype=torch.float32, device=h.device)
        start_ev = torch.cuda.Event(enable_timing=True)
        end_ev = torch.cuda.Event(enable_timing=True)
        torch.empty(1, device=h.device)  # make sure the runtime is initialised before resolving it
        reset_l2 = persisting_l2_resetter()
    else:
        reset_l2 = None
    budget_ms = max(0.0, float(req.launch_budget_ms))
    budget = getattr(h, "budget", None) if cuda else None
    hold = None
    if budget is not None and budget_ms > 0:
        try:
            if budget.verify(torch):  # once per process; this request runs in the grader's exclusive section
                hold = budget.hold
        except Exception as exc:  # noqa: BLE001 - a probe that fails turns the hold off, with the reason
            budget.verified, budget.reason = False, f"probe failed: {type(exc).__name__}: {exc}"[:300]
    l2_resets_ok = []

    from drkernel.env.task import scale_floats

    def make_inputs(i: int) -> list[Any]:
        return scale_floats(pool[i % len(pool)], factors[i % len(factors)])

    def one_call(model: Any, i: int, grad_ctx: Any) -> tuple[float, float, float, Any]:
        x = make_inputs(i)
        if reset_l2 is not None:
            l2_resets_ok.append(reset_l2())
        h.sync()
        if flush is not None:
            flush.zero_()  # queued ahead of the start event: the GPU is busy while the host launches
            if hold is not None:
                hold(budget_ms)  # every SM held while the host launches the call
        try:
            with grad_ctx():
                t0 = _perf()
                if cuda:
                    start_ev.record()
                out = model(*x)
                if cuda:
                    end_ev.record()
                t_launched = _perf()
                h.sync()
                t1 = _perf()
        except BaseException as exc:  # noqa: BLE001 - the candidate's process: its failure, stage timing
            who = "ModelNew.forward" if model is h.model else "the reference (run beside the candidate)"
            raise CandidateError("timing", f"{who} raised while timed: "
                                 + _trim_traceback(exc, h.candidate_file)) from None
        host_ms = (t1 - t0) * 1e3
        ev_ms = start_ev.elapsed_time(end_ev) if cuda else host_ms
        return ev_ms, host_ms, (t_launched - t0) * 1e3, out

    no_grad = torch.no_grad
    t_begin = _perf()
    for i in range(warmup):
        one_call(h.reference, i, no_grad)
        one_call(h.model, i, no_grad)
    ref_ev, ref_host, cand_ev, cand_host = [], [], [], []
    launch: dict[str, list[float]] = {"reference": [], "candidate": []}
    calls_without_launch = 0
    spot_out = []
    for i in range(trials):
        order = ("ref", "cand") if i % 2 == 0 else ("cand", "ref")
        for who in order:
            if who == "ref":
                ev, host, launched, _ = one_call(h.reference, i, no_grad)
                ref_ev.append(ev)
                ref_host.append(host)
                launch["reference"].append(launched)
            else:
                h.recorder.reset()
                ev, host, launched, out = one_call(h.model, i, no_grad)
                if h.recorder.total() == 0:
                    calls_without_launch += 1
                cand_ev.append(ev)
                cand_host.append(host)
                launch["candidate"].append(launched)
                if i in spot:
                    desc = None
                    if type(out) is torch.Tensor:
                        desc = h.tensor_io.write_tensor(out, h.workdir, f"spot_{i}")
                    spot_out.append({"call": i, "out": desc})
                del out
    total_s = _perf() - t_begin
    ref_gap = statistics.median([hh - e for hh, e in zip(ref_host, ref_ev)])
    cand_gap = statistics.median([hh - e for hh, e in zip(cand_host, cand_ev)])
    # Reported time: event time, unless host time (minus the reference's normal gap) is larger.
    cand_ms = [max(e, hh - ref_gap) for e, hh in zip(cand_ev, cand_host)]
    ref_ms = ref_ev
    return TimeReply(
        reference=summarize(ref_ms), candidate=summarize(cand_ms),
        candidate_event=summarize(cand_ev), candidate_host=summarize(cand_host),
        reference_host=summarize(ref_host),
        host_gap_ms={"reference": ref_gap, "candidate": cand_gap},
        launch_ms={k: statistics.median(v) for k, v in launch.items()},
        calls_without_launch=calls_without_launch, spot=spot_out,
        timed_total_ms=sum(ref_host) + sum(cand_host), total_s=total_s,
        samples={"reference": ref_ms, "candidate": cand_ms},
        persisting_l2_reset=(all(l2_resets_ok) if l2_resets_ok else None),
        launch_budget=_budget_report(h, budget, budget_ms) if cuda else None,
    )


def _budget_report(h: Any, budget: Any, ms: float) -> dict[str, Any]:
    if budget is None:
        return {"requested_ms": ms, "ms": 0.0, "verified": False,
                "reason": getattr(h, "budget_error", None) or "no launch budget in this worker"}
    return budget.describe(ms)
