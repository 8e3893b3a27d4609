"""Timing protocol (runs in the candidate's process, driven by the grader).

Reference and candidate run in the same process on the same device, interleaved (the order
alternates every trial), after warm-up. Per timed call:

1. inputs: a fresh device copy of one of ``P`` input sets drawn from hidden seeds, multiplied by a
   per-call factor (a power of two, negated when the task allows) — prepared outside the timed
   region, so a cache keyed on pointers, shapes or values returns a wrong answer;
2. on CUDA: the L2 cache is flushed by writing a buffer twice its size, then the device is
   synchronised;
3. the call is bracketed by CUDA events on the current stream *and* by a host clock around a
   device-wide synchronisation. Work hidden on side streams or threads escapes the events but not
   the host clock: a candidate whose host time exceeds its event time by much more than the
   reference's does is flagged ``side_stream``. The reported time is the larger of the two
   (event time, or host time minus the reference's host-event gap);
4. every candidate call must launch one of its own Triton kernels, and a few calls chosen by the
   grader have their outputs written back for checking against the reference.

Statistics: median (reported), and the 25th/75th percentiles, min and max as the spread.
"""

from __future__ import annotations

import statistics
import time
from typing import Any

_perf = time.perf_counter


def _pct(xs: list[float], q: float) -> float:
    s = sorted(xs)
    if not s:
        return float("nan")
    k = (len(s) - 1) * q
    lo, hi = int(k), min(int(k) + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (k - lo)


def summarize(xs: list[float]) -> dict[str, float]:
    return {"median": statistics.median(xs), "p25": _pct(xs, 0.25), "p75": _pct(xs, 0.75),
            "min": min(xs), "max": max(xs), "n": len(xs)}


def time_interleaved(h: Any, msg: dict[str, Any]) -> dict[str, Any]:
    torch = h.torch
    cuda = h.device.startswith("cuda")
    pool = [h.pool_inputs(s) for s in msg["pool_seeds"]]
    factors: list[float] = msg["factors"]  # one per timed call (and warm-up call)
    trials, warmup = int(msg["trials"]), int(msg["warmup"])
    spot = set(msg.get("spot", []))
    flush = None
    if cuda:
        l2 = torch.cuda.get_device_properties(h.device).L2_cache_size or (50 << 20)
        flush = torch.empty(2 * l2 // 4, dtype=torch.float32, device=h.device)
        start_ev = torch.cuda.Event(enable_timing=True)
        end_ev = torch.cuda.Event(enable_timing=True)

    def make_inputs(i: int) -> list[Any]:
        src = pool[i % len(pool)]
        f = factors[i % len(factors)]
        return [(x * f if x.is_floating_point() else x.clone()) if isinstance(x, torch.Tensor) else x for x in src]

    def one_call(model: Any, i: int, grad_ctx: Any) -> tuple[float, float, Any]:
        x = make_inputs(i)
        if flush is not None:
            flush.zero_()
        h.sync()
        with grad_ctx():
            t0 = _perf()
            if cuda:
                start_ev.record()
            out = model(*x)
            if cuda:
                end_ev.record()
            h.sync()
            t1 = _perf()
        host_ms = (t1 - t0) * 1e3
        ev_ms = start_ev.elapsed_time(end_ev) if cuda else host_ms
        return ev_ms, host_ms, out

    no_grad = torch.no_grad
    t_begin = _perf()
    for i in range(warmup):
        one_call(h.reference, i, no_grad)
        one_call(h.model, i, no_grad)
    ref_ev, ref_host, cand_ev, cand_host = [], [], [], []
    calls_without_launch = 0
    spot_out = []
    for i in range(trials):
        order = ("ref", "cand") if i % 2 == 0 else ("cand", "ref")
        for who in order:
            if who == "ref":
                ev, host, _ = one_call(h.reference, i, no_grad)
                ref_ev.append(ev)
                ref_host.append(host)
            else:
                h.recorder.reset()
                ev, host, out = one_call(h.model, i, no_grad)
                if h.recorder.total() == 0:
                    calls_without_launch += 1
                cand_ev.append(ev)
                cand_host.append(host)
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
    return {
        "ok": True,
        "reference": summarize(ref_ms), "candidate": summarize(cand_ms),
        "candidate_event": summarize(cand_ev), "candidate_host": summarize(cand_host),
        "reference_host": summarize(ref_host),
        "host_gap_ms": {"reference": ref_gap, "candidate": cand_gap},
        "calls_without_launch": calls_without_launch, "spot": spot_out,
        "timed_total_ms": sum(ref_host) + sum(cand_host), "total_s": total_s,
        "samples": {"reference": ref_ms, "candidate": cand_ms},
    }
