"""Reading a worker's device records in the grader: each call's time, and whose kernels it ran.

The worker's CUDA profiler records every kernel, copy and memset with its device start, duration
and stream (:func:`drkernel.env.measure.profiling.device_records`). The harness brackets every call with two
fence kernels on the call's stream (:class:`drkernel.env.measure.budget.Fences`). Here, in the grader::

    window i     = from the end of fence_begin[i] to the start of fence_end[i]   (the call's stream)
    members i    = records on the call's stream inside window i, and records on any other stream
                   that start between the end of fence_end[i-1] and the call's stream's next record
                   after fence_end[i] (side-stream work may start beside the flush, before
                   fence_begin[i], and finishes before the device-wide synchronisation after the call)
    time i       = end of the last member - start of the first member   (device activity span;
                   the window itself when the call ran nothing on the device)
    own i        = device time of members whose name carries the candidate's kernel suffix
    coverage     = sum(own) / sum(device time of all members)      over the calls taken together

The span starts at the call's first device record, not at the fence: the host's launch path before
the first kernel (Python, argument checks; under CPU load it can outlast the launch budget) is not
the kernel's time, so timings do not move when the grader is loaded. Gaps *between* a call's
records stay in (dependent launches, host work between kernels), and so does side-stream work.
Host-side computation needs device-to-host copies, which are records of the call (and flagged). A name the candidate does not control decides
what is its own (:func:`drkernel.env.measure.launches.install_naming`), not a profiler label. Records that
do not bracket the calls the grader made (a fence too many or too few, out of order, on two
streams) are forged: :class:`ForgedRecords`.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field
from typing import Any

FENCE_BEGIN = "drkernel_fence_begin"
FENCE_END = "drkernel_fence_end"
DTOH_PREFIX = "Memcpy DtoH"


class ForgedRecords(ValueError):
    """The device records do not bracket the calls the grader made."""


@dataclass
class CallWindow:
    time_ns: int
    device_ns: int
    """Device time of everything the call ran (overlapping records counted each)."""
    own_ns: int
    own_launches: int
    dtoh_ns: int
    other_stream_ns: int
    by_name: dict[str, int] = field(default_factory=dict)


def _records(events: Any) -> list[tuple[int, int, int, str]]:
    if not isinstance(events, list):
        raise ForgedRecords("device records are not a list")
    out = []
    for e in events:
        if (not isinstance(e, list) or len(e) != 4 or not isinstance(e[0], str)
                or not all(isinstance(v, int) and not isinstance(v, bool) for v in e[1:])):
            raise ForgedRecords(f"malformed device record {str(e)[:80]}")
        name, start, dur, stream = e
        if dur < 0:
            raise ForgedRecords(f"negative duration in device record {name[:60]}")
        out.append((start, dur, stream, name))
    out.sort()
    return out


def cut_windows(events: Any, n_calls: int, own_suffix: str | None) -> list[CallWindow]:
    """One :class:`CallWindow` per call, in call order (see the module doc)."""
    recs = _records(events)
    begins = [r for r in recs if r[3] == FENCE_BEGIN]
    ends = [r for r in recs if r[3] == FENCE_END]
    if len(begins) != n_calls or len(ends) != n_calls:
        raise ForgedRecords(f"{len(begins)} begin and {len(ends)} end fences for {n_calls} calls")
    if n_calls == 0:
        return []
    streams = {r[2] for r in begins + ends}
    if len(streams) != 1:
        raise ForgedRecords("the fences ran on more than one stream")
    main = streams.pop()
    for i in range(n_calls):
        if not begins[i][0] <= ends[i][0] or (i + 1 < n_calls and not ends[i][0] <= begins[i + 1][0]):
            raise ForgedRecords(f"the fences of call {i} are out of order")
    main_starts = [r[0] for r in recs if r[2] == main]
    windows = []
    for i in range(n_calls):
        lo = begins[i][0] + begins[i][1]
        hi = ends[i][0]
        after_end = ends[i][0] + ends[i][1]
        j = bisect.bisect_left(main_starts, after_end)
        boundary = main_starts[j] if j < len(main_starts) else float("inf")
        # other streams: anything since the previous call's end fence (work a call puts on a side
        # stream may start beside the harness's flush, before fence_begin) until the call's stream
        # resumes the harness's work after the device-wide synchronisation
        other_lo = ends[i - 1][0] + ends[i - 1][1] if i else -1
        w = CallWindow(time_ns=max(hi - lo, 0), device_ns=0, own_ns=0, own_launches=0, dtoh_ns=0, other_stream_ns=0)
        first_start, last_end = None, None
        k = bisect.bisect_left(recs, (other_lo,))
        while k < len(recs) and recs[k][0] < boundary:
            start, dur, stream, name = recs[k]
            k += 1
            if name in (FENCE_BEGIN, FENCE_END):
                continue
            if stream == main:
                if not lo <= start < hi:
                    continue
            else:
                w.other_stream_ns += dur
            w.device_ns += dur
            first_start = start if first_start is None else min(first_start, start)
            last_end = start + dur if last_end is None else max(last_end, start + dur)
            short = name[:120]
            w.by_name[short] = w.by_name.get(short, 0) + dur
            if own_suffix and own_suffix in name:
                w.own_ns += dur
                w.own_launches += 1
            elif name.startswith(DTOH_PREFIX):
                w.dtoh_ns += dur
        if first_start is not None:  # the call's device activity, first start to last end
            w.time_ns = last_end - first_start
        windows.append(w)
    return windows


def own_outside_windows(events: Any, n_calls: int, own_suffix: str | None) -> tuple[int, int]:
    """``(count, device ns)`` of the candidate's own kernels that ran after the first call began and
    inside no call's window: on the calls' stream outside every ``[fence_begin end, fence_end
    start)``, on another stream after the last call's boundary (before it, another stream's work is
    counted as a call's, :func:`cut_windows`). The harness runs none of the candidate's kernels
    between calls, so such a kernel was queued by the candidate's code running outside its calls
    (work deferred past the closing fence, where it would not be timed). Kernels before the first
    call (the model's construction at load) are not counted."""
    if not own_suffix or n_calls <= 0:
        return 0, 0
    recs = _records(events)
    begins = [r for r in recs if r[3] == FENCE_BEGIN]
    ends = [r for r in recs if r[3] == FENCE_END]
    if len(begins) != n_calls or len(ends) != n_calls or len({r[2] for r in begins + ends}) != 1:
        raise ForgedRecords(f"{len(begins)} begin and {len(ends)} end fences for {n_calls} calls")
    main = begins[0][2]
    spans = [(b[0] + b[1], e[0]) for b, e in zip(begins, ends)]
    main_starts = [r[0] for r in recs if r[2] == main]
    last_end = ends[-1][0] + ends[-1][1]
    j = bisect.bisect_left(main_starts, last_end)
    last_boundary = main_starts[j] if j < len(main_starts) else float("inf")
    count = ns = 0
    for start, dur, stream, name in recs:
        if own_suffix not in name or start < begins[0][0]:
            continue
        if stream == main:
            k = bisect.bisect_right(spans, (start, float("inf"))) - 1
            inside = k >= 0 and spans[k][0] <= start < spans[k][1]
        else:
            inside = start < last_boundary
        if not inside:
            count, ns = count + 1, ns + dur
    return count, ns


def coverage_of(windows: list[CallWindow]) -> float | None:
    """Share of the calls' device time spent in own kernels (None: no device activity)."""
    total = sum(w.device_ns for w in windows)
    return (sum(w.own_ns for w in windows) / total) if total > 0 else None


def top_kernels(windows: list[CallWindow], own_suffix: str | None, k: int = 8) -> list[dict[str, Any]]:
    """The largest kernels by device time per call, marked own or not (suffix stripped for display)."""
    agg: dict[str, int] = {}
    for w in windows:
        for name, ns in w.by_name.items():
            agg[name] = agg.get(name, 0) + ns
    n = max(len(windows), 1)
    out = []
    for name, ns in sorted(agg.items(), key=lambda kv: -kv[1])[:k]:
        own = bool(own_suffix) and own_suffix in name
        out.append({"name": name.replace(own_suffix, "") if own else name, "us": ns / n / 1e3, "own": own})
    return out


__all__ = ["CallWindow", "ForgedRecords", "cut_windows", "own_outside_windows", "coverage_of", "top_kernels", "FENCE_BEGIN", "FENCE_END"]
