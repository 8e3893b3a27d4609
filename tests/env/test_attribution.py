"""The grader's reading of device records (drkernel.env.measure.attribution): windows between fences,
time, own share, side streams, host copies, and forged records. Numbers worked by hand."""

import pytest

from drkernel.env.measure.attribution import FENCE_BEGIN, FENCE_END, ForgedRecords, coverage_of, cut_windows, top_kernels

S = "__dk1a2b"  # the candidate's kernel suffix
MAIN, SIDE = 7, 13


def call(t0: int, kernels: list[tuple[str, int, int, int]], gap_after: int = 5_000) -> list[list]:
    """Harness records around one call starting at t0: flush and hold, fence, the call's
    kernels (name, offset after the fence, duration, stream), fence, then the next draw."""
    recs = [["void at::native::FillFunctor", t0, 80_000, MAIN], ["_hold_kernel", t0 + 80_000, 1_000_000, MAIN],
            [FENCE_BEGIN, t0 + 1_080_000, 1_000, MAIN]]
    lo = t0 + 1_081_000
    end = lo
    for name, off, dur, stream in kernels:
        recs.append([name, lo + off, dur, stream])
        if stream == MAIN:  # the end fence queues behind the call's stream only
            end = max(end, lo + off + dur)
    recs.append([FENCE_END, end + 500, 1_000, MAIN])
    recs.append(["void at::native::normal_kernel", end + 500 + 1_000 + gap_after, 3_000, MAIN])  # next draw
    return recs


def test_one_call_time_and_coverage_by_hand():
    recs = call(0, [(f"relu_kernel{S}", 0, 10_000, MAIN), ("sm90_xmma_gemm_cublas", 10_000, 30_000, MAIN)])
    (w,) = cut_windows(recs, 1, S)
    # the call's device activity: from the first kernel's start to the last one's end = 10 + 30 us
    assert w.time_ns == 40_000
    assert (w.own_ns, w.device_ns, w.own_launches) == (10_000, 40_000, 1)
    assert coverage_of([w]) == pytest.approx(0.25)
    top = top_kernels([w], S)
    assert top[0] == {"name": "sm90_xmma_gemm_cublas", "us": 30.0, "own": False}
    assert top[1]["name"] == "relu_kernel" and top[1]["own"]


def test_harness_work_outside_the_fences_is_not_the_candidates():
    """The flush, the hold and the next call's input draw are on the call's stream but outside its window."""
    recs = call(0, [(f"k{S}", 0, 10_000, MAIN)]) + call(2_000_000, [(f"k{S}", 0, 10_000, MAIN)])
    ws = cut_windows(recs, 2, S)
    assert [w.device_ns for w in ws] == [10_000, 10_000] and coverage_of(ws) == 1.0


def test_side_stream_work_is_timed_and_counted_even_after_the_end_fence():
    """Work left on another stream runs past fence_end: it still belongs to the call, and the time
    runs to its end (it cannot hide)."""
    recs = call(0, [(f"k{S}", 0, 10_000, MAIN), ("void at::native::tanh_kernel", 5_000, 50_000, SIDE)])
    (w,) = cut_windows(recs, 1, S)
    assert w.other_stream_ns == 50_000 and w.device_ns == 60_000
    assert w.time_ns == 55_000  # the side kernel ends at +55 us, after fence_end (+10.5 us)


def test_the_host_launch_path_before_the_first_kernel_is_not_timed():
    """Under CPU load the first kernel may start long after fence_begin: that delay is the host's."""
    recs = call(0, [(f"k{S}", 300_000, 10_000, MAIN)])
    (w,) = cut_windows(recs, 1, S)
    assert w.time_ns == 10_000


def test_side_stream_work_starting_before_the_fence_is_the_calls():
    """A side-stream kernel that starts beside the flush, before fence_begin, still counts and is timed."""
    recs = call(0, [(f"k{S}", 0, 10_000, MAIN)]) + [["void at::native::relu_kernel", 1_000_000, 60_000, SIDE]]
    (w,) = cut_windows(recs, 1, S)
    assert w.other_stream_ns == 60_000
    assert w.time_ns == 1_091_000 - 1_000_000  # from the side kernel's start to the main kernel's end


def test_device_to_host_copies_are_counted():
    recs = call(0, [(f"k{S}", 0, 10_000, MAIN), ("Memcpy DtoH (Device -> Pageable)", 10_000, 40_000, MAIN)])
    (w,) = cut_windows(recs, 1, S)
    assert w.dtoh_ns == 40_000 and coverage_of([w]) == pytest.approx(0.2)


@pytest.mark.parametrize("mutate, match", [
    (lambda r: r + [[FENCE_END, 10**9, 1_000, MAIN]], "fences for"),  # one fence too many
    (lambda r: [x for x in r if x[0] != FENCE_BEGIN], "fences for"),  # missing
    (lambda r: [[n, s, d, SIDE if n == FENCE_END else st] for n, s, d, st in r], "more than one stream"),
    (lambda r: r + [["x", 1, -5, MAIN]], "negative"),
    (lambda r: r + [["x", "soon", 1, MAIN]], "malformed"),
])
def test_forged_or_inconsistent_records_are_refused(mutate, match):
    recs = call(0, [(f"k{S}", 0, 10_000, MAIN)])
    with pytest.raises(ForgedRecords, match=match):
        cut_windows(mutate(recs), 1, S)


def test_a_fence_launched_by_the_candidate_inside_its_call_is_caught():
    """A kernel named like the harness's fence, launched mid-call to shorten the window, changes
    the fence count."""
    recs = call(0, [(f"k{S}", 0, 10_000, MAIN), (FENCE_END, 10_000, 1_000, MAIN),
                    ("sm90_xmma_gemm_cublas", 11_000, 30_000, MAIN)])
    with pytest.raises(ForgedRecords):
        cut_windows(recs, 1, S)


def test_no_own_kernel_and_no_activity():
    recs = call(0, [("void at::native::relu_kernel", 0, 10_000, MAIN)])
    (w,) = cut_windows(recs, 1, S)
    assert w.own_launches == 0 and coverage_of([w]) == 0.0
    assert coverage_of(cut_windows(call(0, []), 1, S)) is None


def test_own_kernels_between_the_calls_are_work_outside_the_call():
    """The harness runs none of the candidate's kernels between calls: an own kernel after the end
    fence (work deferred past forward, e.g. by a hook the harness's next step triggers) is counted;
    the same kernel inside the window, or at load before the first call, is not."""
    from drkernel.env.measure.attribution import own_outside_windows

    honest = call(0, [(f"k{S}", 0, 10_000, MAIN)]) + call(2_000_000, [(f"k{S}", 0, 10_000, MAIN)])
    at_load = [[f"init{S}", -500_000, 7_000, MAIN]]
    assert own_outside_windows(at_load + honest, 2, S) == (0, 0)
    deferred = call(0, [(f"token{S}", 0, 1_000, MAIN)])
    end = max(r[1] + r[2] for r in deferred if r[0] == FENCE_END)
    deferred.append([f"real{S}", end + 200, 40_000, MAIN])  # queued after the end fence, before the sync
    deferred += call(2_000_000, [(f"token{S}", 0, 1_000, MAIN)])
    deferred.append([f"late{S}", 9_000_000, 5_000, SIDE])  # another stream, after the last call
    assert own_outside_windows(deferred, 2, S) == (2, 45_000)
    # the windows themselves never see it: the call looks like a 1 us kernel
    assert [w.time_ns for w in cut_windows(deferred, 2, S)] == [1_000, 1_000]
    assert own_outside_windows(honest, 2, None) == (0, 0)
    with pytest.raises(ForgedRecords):
        own_outside_windows(honest, 3, S)
