"""Calling the model, in the worker: one procedure for every call (checked, warm-up, timed), for
the candidate and, in its own clean process, for the reference.

Per call, on CUDA::

    inputs drawn from the call's hidden seed (x its factor)     harness work, before the fence
    persisting-L2 reset, device sync, L2 flush (queued)          ''
    launch budget: the hold kernel, every SM busy (queued)       ''
    fence_begin (queued)                                         ---- the call's window opens
    forward(*inputs)                                              the model's kernels queue behind
    release: what the harness let go of since the last call is   the candidate's finalisers run
      freed, two generations collected                            only here (Harness._release)
    where the output lies noted; the seal checked                 (drkernel.env.measure.capture, .seal)
    fence_end (queued, through Triton's C launcher)              ---- the window closes (on the GPU)
    the output's bytes copied (queued, one C call)                what the spot checks will read
    integrity: the ledger and the fingerprint, read at once       host work while the GPU finishes
    the seal checked again (the checks ran torch's Python)
    device-wide sync (the C function)

The queued flush and hold keep the GPU busy while the host runs the call's Python and launch path,
so the window holds device time, not the launcher's jitter (12% -> 1.2% spread of one matmul on
an H100). Every call the candidate sees is made this way (also correctness calls), so nothing about
a call tells it whether it is timed. The time and the share of own kernels are not computed here:
the grader reads them from the profiler's records between the fences
(:mod:`drkernel.env.measure.attribution`). The host clock around the call is reported for diagnostics only.

On the CPU (Triton's interpreter) the call is timed with the host clock and its torch work outside
own kernels is costed by the :class:`~drkernel.env.measure.profiling.ForeignWork` mode.

Timed calls of the candidate: after each call returns, the worker asks the grader whether to keep
its output (:class:`SpotChannel`); the grader decides then, with its own random numbers, so no plan
of checked calls exists in the candidate's process. Kept outputs (whole, or a sample of a large
one's elements drawn from a seed sent with the answer: :mod:`drkernel.env.measure.spot`) are copied when
the answer arrives, before the candidate runs again, and written back after the request's last
call and its integrity check.
"""

from __future__ import annotations

import statistics
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from drkernel.env.faults import CandidateError, trim_traceback

if TYPE_CHECKING:
    from drkernel.env.measure.budget import LaunchBudget
    from drkernel.env.protocol import TimeReply, TimeRequest

FLUSH_MIN_BYTES = 256 << 20
"""The L2 flush writes at least this much (KernelBench's 256 MB): at least twice any current GPU's L2."""
_CUDA_LIMIT_PERSISTING_L2 = 0x06
CALL_PARTS = ("pre_keep", "pre_sync", "pre_queue", "after_guard", "after_count")
"""The parts of ``call_pre`` (earlier inputs kept alive; the L2 reset and the sync before the call;
the flush, the hold and the opening fence queued) and of ``call_after`` (the fingerprint and the
audit's records; the launch and foreign-work counters), as ``call_<part>``."""
WORKER_PHASES = ("inputs", "call", "call_pre", "call_after", "spot", "snapshot", "finish", "write", "profiler",
                 *(f"call_{p}" for p in CALL_PARTS))
"""The parts of a timing request the worker reports (``TimeReply.phases_s``, diagnostics only)."""


def persisting_l2_resetter():
    """A function that clears any persisting-L2 carve-out through the CUDA runtime torch loaded.

    It sets ``cudaLimitPersistingL2CacheSize`` to 0 and resets persisting lines
    (``cudaCtxResetPersistingL2Cache``) before every timed call (pattern #20; costs nothing
    measurable on an H100, tests/benchmarks/diagnostics/l2_reset_cost.py). None when no runtime
    library can be found (then only the flush protects timing)."""
    import ctypes

    from drkernel.env.measure.capture import cuda_runtime

    lib = cuda_runtime()
    if lib is None:
        return None
    try:
        set_limit, reset = lib.cudaDeviceSetLimit, lib.cudaCtxResetPersistingL2Cache
    except AttributeError:
        return None
    set_limit.argtypes = [ctypes.c_int, ctypes.c_size_t]

    def _reset() -> bool:
        return set_limit(_CUDA_LIMIT_PERSISTING_L2, 0) == 0 and reset() == 0

    return _reset


def _pct(xs: list[float], q: float) -> float:
    s = sorted(xs)
    if not s:
        return float("nan")
    k = (len(s) - 1) * q
    lo, hi = int(k), min(int(k) + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (k - lo)


def summarize(xs: list[float]) -> dict[str, float]:
    """Median (reported), quartiles, min, max and count of a list of times."""
    if not xs:
        return {"n": 0.0}
    return {"median": statistics.median(xs), "p25": _pct(xs, 0.25), "p75": _pct(xs, 0.75),
            "min": min(xs), "max": max(xs), "n": float(len(xs))}


class SpotChannel:
    """After a timed call: ``keep(i)`` asks the grader whether to keep call ``i``'s output; the
    answer is no (None) or the seed of the elements to send back (:mod:`drkernel.env.measure.spot`).

    Speaks the worker's connection framing (4-byte big-endian length, then the payload) with the
    raw ``os.read``/``os.write`` of the connection's descriptor, captured before the candidate
    loaded, so a later patch of Python's connection classes does not reach it; the sampler's torch
    functions are captured then too."""

    def __init__(self, fd: int):
        import os

        import torch

        from drkernel.env.protocol import frame_head, read_exactly, spot_query, write_all
        from drkernel.env.measure.spot import ANSWER_BYTES, decode_keep, make_sampler

        # everything the answers and the sampling use, bound now: a module the candidate puts in
        # sys.modules later, or a torch attribute it replaces, is not reached
        self._answer_bytes, self._decode = ANSWER_BYTES, decode_keep
        self._sample_index = make_sampler(torch)
        self._select, self._reshape = torch.Tensor.index_select, torch.Tensor.reshape
        # the device sync through its C function (torch.cuda.synchronize's Python looks things up)
        self._clone, self._sync = torch.Tensor.clone, getattr(torch._C, "_cuda_synchronize", torch.cuda.synchronize)
        self._fd, self._read, self._write = fd, os.read, os.write
        self._frame, self._read_exactly, self._write_all = frame_head, read_exactly, write_all
        cell: list[str] = [""]
        # The request's nonce is kept in a closure cell, not an attribute (same reach as the loop's)
        self.arm = lambda nonce: cell.__setitem__(0, nonce)
        self._query = lambda call: spot_query(call, cell[0])

    def keep(self, call: int) -> tuple[int, int] | None:
        """None: not checked; else ``(seed, size)`` of the elements to send back (drkernel.env.measure.spot)."""
        payload = self._query(call)
        self._write_all(self._write, self._fd, self._frame(len(payload)) + payload)
        head = self._exact(4)
        n = int.from_bytes(head, "big", signed=True)
        if n not in (1, self._answer_bytes):
            raise ConnectionError(f"malformed spot answer of {n} bytes")
        answer = self._exact(n)
        if n == 1:
            if answer != b"0":
                raise ConnectionError("malformed spot answer")
            return None
        try:
            return self._decode(answer)
        except ValueError as exc:
            raise ConnectionError(str(exc)) from None

    def snapshot(self, out: Any, plan: tuple[int, int]) -> Any:
        """What comes back of a kept output, copied the moment the answer arrives (before the
        candidate runs again): the whole tensor, or its elements at the plan's flat indices
        (:func:`drkernel.env.measure.spot.sample_index`) as a 1-D tensor. An output returned unfinished
        and completed later (by the next call, say) is judged as it was when its call returned."""
        idx = self._sample_index(out.numel(), plan[0], plan[1], out.device)
        if idx is None:
            snap = self._clone(out)
        else:
            snap = self._select(self._reshape(out, (-1,)), 0, idx)
        if out.is_cuda:
            self._sync()  # the copy is done before the next call launches anything, on any stream
        return snap

    def _exact(self, n: int) -> bytes:
        try:
            return self._read_exactly(self._read, self._fd, n)
        except EOFError:
            raise ConnectionError("the grader closed the connection") from None


class TimingHarness(Protocol):
    """What :func:`run_calls` uses of the worker: its settings, its one way of calling the model, and
    what it reads after the calls. :class:`drkernel.env.process.harness.Harness` implements it; attributes
    are read when used (``l2_reset_ok`` changes with every call), exactly as on the worker."""

    torch: Any
    """The torch module the worker imported (for the output's type check)."""
    tensor_io: Any
    """:mod:`drkernel.env.process.tensor_io`, as the worker imported it."""
    device: str
    """``"cuda"`` or ``"cpu"``."""
    role: str
    """``"candidate"`` or ``"reference"``."""
    candidate_file: str | None
    """The candidate's resolved path (its frames are kept in tracebacks); None in a reference worker."""
    workdir: Path
    """Where kept outputs are written when they do not fit the stage."""
    stage: Any
    """The output stage (:class:`drkernel.env.process.staging.Stage`), or None."""
    spot: SpotChannel
    """Asks the grader, after a timed call, whether to keep its output."""
    budget: LaunchBudget | None
    """The launch budget (CUDA), or None when it could not be prepared."""
    budget_error: str | None
    """Why there is no launch budget, when there is none."""
    timing_hold: tuple[Any, float]
    """``(hold, ms)``: the verified hold and its length; ``(None, 0.0)`` without one."""
    l2_reset_ok: bool | None
    """Whether every persisting-L2 reset so far succeeded; None when none ran."""
    seal_slot: list
    """``[check]`` (drkernel.env.guards.seal) once the candidate is loaded; empty in a reference worker."""

    def reload(self, seed: int | None) -> None:
        """Restore the model's initial parameters, transformed by ``seed`` when given."""

    def pool_inputs(self, seed: int, distribution: str = "native") -> list[Any]:
        """The task's inputs for ``seed`` on this device."""

    def call(self, inputs: list[Any], grad_mode: str, timed: bool) -> tuple[Any, dict[str, Any]]:
        """One call of the model, the same way for every call (see this module's docstring)."""

    def captured(self, out: Any) -> Any:
        """The copy of the call's output taken as its window closed, or None (not copied)."""

    def discard(self, obj: Any) -> None:
        """Let go of ``obj`` in the next call's window (the candidate's finalisers run only there)."""

    def finish_request(self, full: bool) -> None:
        """The request's integrity check."""

    def stop_profiler(self) -> list[list[Any]]:
        """Stop the CUDA profiler and return its device records."""


def run_calls(h: TimingHarness, req: TimeRequest) -> TimeReply:
    """Serve a :class:`~drkernel.env.protocol.TimeRequest`: warm-up and timed calls of the worker's
    model (``h.call``).

    A call that raises is the model's failure at the ``timing`` stage."""
    from drkernel.env.protocol import TimeReply
    from drkernel.env.tasks.task import scale_floats

    torch = h.torch
    cuda = h.device.startswith("cuda")
    seeds, factors = list(req.seeds), list(req.factors)
    warmup = int(req.warmup)
    n = len(seeds)
    budget = h.budget if cuda else None
    budget_ms = h.timing_hold[1] if cuda else 0.0
    kept: list[tuple[int, Any, list[int] | None]] = []  # (call, snapshot, the output's shape)
    host_ms, launch_ms, foreign = [], [], []
    calls_without_launch = 0
    perf = time.perf_counter
    phases = dict.fromkeys(WORKER_PHASES, 0.0)
    if budget is not None:
        budget.reset_clock()
    # read once, at the request's start (no candidate code has run since the last reply's check),
    # and called after every stretch of torch's Python (drkernel.env.guards.seal)
    seal = h.seal_slot[0] if h.seal_slot else (lambda where: None)
    t_begin = perf()
    for i in range(n):
        t0 = perf()
        x = scale_floats(h.pool_inputs(seeds[i]), factors[i])  # the task's code: torch's Python
        seal("before a call")
        if req.reload_seeds:  # after the draw: from the new parameters to the call, nothing that can
            h.reload(req.reload_seeds[i])  # run the candidate's code (its weights prepared off the clock)
        t1 = perf()
        phases["inputs"] += t1 - t0
        try:
            out, call = h.call(x, "no_grad", timed=True)
        except CandidateError:  # (the harness's own verdict on the call)
            raise
        except BaseException as exc:  # noqa: BLE001 - the model's failure, stage timing
            raise CandidateError("timing", ("ModelNew.forward" if h.role == "candidate" else "the reference")
                                 + " raised while timed: " + trim_traceback(exc, h.candidate_file)) from None
        phases["call_pre"] += call.get("pre_ms", 0.0) / 1e3
        phases["call_after"] += call.get("after_ms", 0.0) / 1e3
        for part, ms in call.get("parts_ms", {}).items():
            phases[f"call_{part}"] += ms / 1e3
        host_ms.append(call["host_ms"])
        launch_ms.append(call["launch_ms"])
        foreign.append(call["foreign"])
        if not cuda and h.role == "candidate" and i >= warmup and call["launches"] == 0:
            calls_without_launch += 1
        del x
        t2 = perf()
        phases["call"] += t2 - t1
        if i >= warmup and req.spot:
            plan = h.spot.keep(i)
            t3 = perf()
            phases["spot"] += t3 - t2  # the question and its answer (a round trip to the grader)
            if plan is not None:
                if type(out) is torch.Tensor:
                    # the copy taken as the window closed (drkernel.env.measure.capture), else the output now
                    src = h.captured(out)
                    kept.append((i, h.spot.snapshot(out if src is None else src, plan), list(out.shape)))
                else:
                    kept.append((i, None, None))
            phases["snapshot"] += perf() - t3
        h.discard(out)  # freed in the next call's window: a finaliser of the candidate's runs inside it
        del out
    total_s = perf() - t_begin
    t0 = perf()
    h.finish_request(full=True)  # integrity before anything the candidate could have patched runs
    seal("after the request's checks")
    t1 = perf()
    spot_out = []
    for i, snap, shape in kept:
        if snap is not None:
            desc = h.tensor_io.write_tensor(snap, h.workdir, f"spot_{i}", h.stage)
            spot_out.append({"call": i, "out": desc, "shape": shape})
        else:
            spot_out.append({"call": i, "out": None})
    del kept
    seal("after the kept outputs were written")
    t2 = perf()
    records = h.stop_profiler() if cuda and req.records else []
    seal("after the profiler stopped")
    phases.update(finish=t1 - t0, write=t2 - t1, profiler=perf() - t2)
    return TimeReply(host_ms=host_ms, launch_ms=launch_ms, foreign=foreign, spot=spot_out, total_s=total_s,
                     calls_without_launch=calls_without_launch, events=records,
                     persisting_l2_reset=h.l2_reset_ok if cuda else None,
                     launch_budget=_budget_report(budget, budget_ms, h.budget_error) if cuda else None,
                     phases_s={k: round(v, 4) for k, v in phases.items()})


def _budget_report(budget: LaunchBudget | None, ms: float, budget_error: str | None) -> dict[str, Any]:
    if budget is None:
        return {"requested_ms": ms, "ms": 0.0, "verified": False,
                "reason": budget_error or "no launch budget in this worker"}
    out = budget.describe(ms)
    if budget.verified and ms > 0:
        try:
            out["sm_clock_mhz"] = budget.clock_mhz()
        except Exception:  # noqa: BLE001 - a diagnostic: its failure changes nothing
            out["sm_clock_mhz"] = None
    return out


__all__ = ["CALL_PARTS", "WORKER_PHASES", "run_calls", "TimingHarness", "summarize", "persisting_l2_resetter", "SpotChannel", "FLUSH_MIN_BYTES"]
