"""The launch budget: the GPU held, every SM full, while the host launches a timed call.

Why: the timed region starts with a CUDA event queued behind the L2 flush. If the host's launch path
(Python, argument checks, Triton's launcher: 0.12-0.22 ms for two launches) outlasts the flush
(~85 us on an H100), the GPU idles inside the timed region and the measurement carries the
launcher's jitter: ~5% between evaluations of one kernel. Holding the GPU a little longer, so that
every launch of the call is queued before the start event fires, removes it (1.5% on the same
kernel on an H100).

How it stays sound for rewards: a plain sleep kernel (``torch.cuda._sleep``, one thread) leaves the
GPU free beside it, so a candidate could run its work on a side stream *during* the sleep and finish
before the start event, unseen by both clocks. The hold here is a spin kernel launched with enough
blocks to fill every thread slot of every SM (``multi_processor_count x max_threads_per_SM /
threads_per_block`` resident blocks of a kernel that uses few registers and no shared memory), so
no other kernel can be scheduled until it ends; side-stream kernels start no earlier than the start
event and the host clock around the device-wide synchronisation sees them (the ``side_stream``
check in :mod:`drkernel.env.measure.timing`). Whether the hold really fills the GPU is not assumed: the
probe launches a kernel on a second stream right behind a hold and keeps the budget only if that
kernel started after the hold ended, both read from the GPU's global timer (:func:`_probe`). The
grader probes once per device while it holds the GPU exclusively (:func:`device_verdict`: a probe
beside another process's kernels is not conclusive); each worker compiles its hold at start-up
(:meth:`LaunchBudget.prepare`) and at load, before the candidate's module is imported, adopts the
grader's answer for a hold of the same shape, or else probes itself (:meth:`LaunchBudget.verify`).
Without a verified hold a process times without it and the reply says why.

What it cannot stop: copy-engine work (``cudaMemcpyAsync`` on a side stream) needs no SM and can run
beside the hold. Computing with it needs the CPU to read device data on a side stream, which the
static gate rejects (stream creation and switching, ctypes); the gain is bounded by the budget.

Spin (every block ends at the same moment, however late it was dispatched)::

    start = the first block's %globaltimer     (published through one int64, zeroed before each hold)
    while %globaltimer - start < budget_ns: pass

The publishing block also adds the SM cycles (``%clock64``) and the nanoseconds it spun to two
running sums: their ratio is the SMs' effective clock over the holds (:meth:`LaunchBudget.clock_mhz`,
reported with each timing; NVML reports only the clock the driver asked for).

Importing this module imports Triton; the worker imports it on CUDA only.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import Any

import triton
import triton.language as tl

THREADS_PER_BLOCK = 1024
"""Threads of one hold block (32 warps): two fill an SM's 2048 thread slots, and few blocks are
dispatched quickly (2,112 blocks of 128 threads took ~40 us to dispatch on an H100, long enough
for the first ones to finish early and let another stream in)."""
PROBE_MS = 0.3
"""The hold used by the probe (:meth:`LaunchBudget.verify`)."""


@triton.jit
def _now():
    return tl.inline_asm_elementwise("mov.u64 $0, %globaltimer;", "=l", [], dtype=tl.int64,
                                     is_pure=False, pack=1)


@triton.jit
def _clock():
    return tl.inline_asm_elementwise("mov.u64 $0, %clock64;", "=l", [], dtype=tl.int64, is_pure=False, pack=1)


@triton.jit(do_not_specialize=["ns"])  # one binary for every length (launched through its C entry point)
def _hold_kernel(start_ptr, ns):
    # start_ptr[0]: the start (zeroed before each hold); [1], [2]: SM cycles and nanoseconds the
    # publishing block spun, summed over holds (the effective SM clock, read by LaunchBudget.clock_mhz)
    now = _now()
    c0 = _clock()
    first = tl.atomic_cas(start_ptr, tl.cast(0, tl.int64), now)  # the first block to arrive publishes its start
    start = tl.where(first == 0, now, first)
    while now - start < ns:
        now = _now()
    if first == 0:
        tl.atomic_add(start_ptr + 1, _clock() - c0)
        tl.atomic_add(start_ptr + 2, now - start)


from drkernel.env.measure.attribution import FENCE_BEGIN, FENCE_END  # noqa: E402 - the names below must match


@triton.jit
def drkernel_fence_begin(p):
    tl.store(p, tl.load(p) + 1)


@triton.jit
def drkernel_fence_end(p):
    tl.store(p, tl.load(p) + 1)


class Fences:
    """Two one-thread kernels the harness launches right before and right after every call of the
    model, on the call's stream. In the CUDA profiler's records they bracket each call: the grader
    takes the device activity between them as the call's (:mod:`drkernel.env.measure.attribution`), so the
    call's time and the share of it in the candidate's own kernels come from the GPU's own records,
    not from code running in the candidate's process. Compiled before the candidate loads; launched
    through the compiled kernels' launchers captured then (a later patch of Triton's Python launch
    path does not reach them). A candidate that launches kernels of these names itself changes the
    fence count, which the grader reports as forged."""

    def __init__(self, torch: Any, device: str):
        self.word = torch.zeros(2, dtype=torch.int32, device=device)
        begin = drkernel_fence_begin[(1,)](self.word)
        end = drkernel_fence_end[(1,)](self.word[1:])
        if (begin.name, end.name) != (FENCE_BEGIN, FENCE_END):
            raise RuntimeError(f"fence kernels compiled as {begin.name}, {end.name}")
        self.begin = _captured_launch(begin, self.word, lambda: int(self.word[0]))
        self.end = _captured_launch(end, self.word[1:], lambda: int(self.word[1]))
        """Zero-argument functions (instance attributes, nothing looked up on a class when called):
        the closing one runs right where the candidate's code may have left a patch behind."""


def _c_launcher(compiled: Any) -> Any:
    """``f(grid_x, *args)``: ``compiled`` launched on the default stream through the launcher's C
    entry point, pointers passed as integers; None where that entry point is not a plain C
    function or the kernel needs scratch memory (another Triton's launcher).

    Triton's Python ``__call__`` is looked up on a class the candidate's code could rebind; a
    rebinding there would run its code right where the harness launches its own kernels (after the
    closing fence: outside the call's window; before the hold: with the call's parameters loaded)."""
    run, function, meta = compiled.run, compiled.function, compiled.packed_metadata
    c_launch = getattr(run, "launch", None)
    if (type(c_launch).__name__ != "builtin_function_or_method" or getattr(run, "global_scratch_size", 0)
            or getattr(run, "profile_scratch_size", 0)):
        return None
    coop, pdl = bool(getattr(run, "launch_cooperative_grid", False)), bool(getattr(run, "launch_pdl", False))
    return lambda grid_x, *args: c_launch(grid_x, 1, 1, 0, function, coop, pdl, None, None, meta, None, None, None,
                                          *args)


def _captured_launch(compiled: Any, arg: Any, count: Any) -> Any:
    """A zero-argument function launching ``compiled`` on ``arg`` on the default stream: through
    :func:`_c_launcher` when one launch that way advances the fence's counter (``count``), else
    through the launcher's Python path, as before."""
    run, function, meta = compiled.run, compiled.function, compiled.packed_metadata
    python_path = lambda: run(1, 1, 1, 0, function, meta, None, None, None, arg)  # noqa: E731
    c = _c_launcher(compiled)
    if c is None:
        return python_path
    ptr = int(arg.data_ptr())
    c_path = lambda: c(1, ptr)  # noqa: E731
    try:
        before = count()
        c_path()
        if count() == before + 1:
            return c_path
    except Exception:  # noqa: BLE001 - another Triton's launcher: its Python path, as before
        pass
    return python_path


@dataclass
class LaunchBudget:
    """The hold for one device: prepared once per worker process before the candidate loads,
    verified on first use (inside the grader's exclusive GPU section)."""

    blocks: int
    verified: bool | None
    """None until :meth:`verify` ran; False (with ``reason``) when the hold cannot fill the GPU."""
    start: Any = None
    """Three int64 device words: the start the blocks share (zeroed before each hold), then the
    cycles and nanoseconds summed for :meth:`clock_mhz`."""
    reason: str | None = None
    probe_gap_ms: float | None = None
    """Probe's start minus the hold's end (>= 0: the probe waited for the hold)."""
    c_hold: Any = None
    """``f(ns)``: the hold through Triton's C entry point (:func:`_c_launcher`), checked at
    :meth:`prepare`; None: the JIT's Python path."""
    regs_per_thread: int | None = None
    verified_by: str | None = None
    """"worker" (its own probe) or "grader" (:meth:`adopt`)."""

    def hold(self, ms: float) -> None:
        """Queue a hold of ``ms`` milliseconds (nothing unless verified): on the default stream
        through the C launcher, else on torch's current stream (the worker's is the default one)."""
        if self.verified and ms > 0:
            if self.c_hold is not None:
                self.start[:1].zero_()
                self.c_hold(int(ms * 1e6))
            else:
                _launch(self.start, self.blocks, ms)

    def reset_clock(self) -> None:
        """Start a new measurement of the SM clock (the holds queued from now on)."""
        if self.start is not None and self.start.numel() >= 3:
            self.start[1:].zero_()

    def clock_mhz(self) -> float | None:
        """The SMs' effective clock while the holds since :meth:`reset_clock` spun: cycles counted by
        the publishing block (``%clock64``) over the nanoseconds that passed (``%globaltimer``). A
        diagnostic (NVML reports the clock the driver asked for, 1980 MHz throughout on an H100 whose
        kernels ran 1-2% slower warm than cold), read from the candidate's process: never used in a
        verdict. None without a hold since the reset."""
        if self.start is None or self.start.numel() < 3:
            return None
        cycles, ns = (int(v) for v in self.start[1:].tolist())
        return round(1e3 * cycles / ns, 1) if ns > 0 and cycles > 0 else None

    def describe(self, requested_ms: float) -> dict[str, Any]:
        return {"requested_ms": requested_ms, "ms": requested_ms if self.verified else 0.0,
                "verified": bool(self.verified), "blocks": self.blocks, "probe_gap_ms": self.probe_gap_ms,
                "regs_per_thread": self.regs_per_thread, "reason": self.reason, "verified_by": self.verified_by}

    def verdict(self) -> dict[str, Any]:
        """What :meth:`adopt` needs from a probed hold of the same shape (sent in the load request)."""
        return {"verified": self.verified, "blocks": self.blocks, "regs_per_thread": self.regs_per_thread,
                "probe_gap_ms": self.probe_gap_ms, "reason": self.reason}

    def adopt(self, verdict: dict[str, Any] | None) -> bool:
        """Take another process's probe of a hold of this shape (the grader's, made while nothing else
        ran on the GPU) instead of probing; False when there is none, it was inconclusive, or its
        hold had another grid or register count (then :meth:`verify` probes here, or, in a load's
        part outside the GPU gate, the hold stays off with the reason: ``Harness._verify_budget``)."""
        if (self.verified is not None or not isinstance(verdict, dict) or verdict.get("verified") is None
                or verdict.get("blocks") != self.blocks or verdict.get("regs_per_thread") != self.regs_per_thread):
            return False
        self.verified = bool(verdict["verified"])
        self.probe_gap_ms, self.reason, self.verified_by = verdict.get("probe_gap_ms"), verdict.get("reason"), "grader"
        return True

    @classmethod
    def prepare(cls, torch: Any, device: str) -> "LaunchBudget":
        """Compile the hold and size it to fill ``device`` (GPU work: one launch of a few microseconds).

        The probe is left to :meth:`verify`: it holds the whole GPU for about 1 ms, which a spare
        starting beside another evaluation's timing must not do."""
        props = torch.cuda.get_device_properties(device)
        blocks, per_sm = blocks_to_fill(props)
        start = torch.zeros(3, dtype=torch.int64, device=device)  # the start word, then the clock's sums
        compiled = _launch(start, blocks, 0.001)
        regs = _n_regs(compiled)
        _stamp_kernel.warmup(start, grid=(1,))  # the probe's kernel compiled now, launched only by verify
        problem = fit_problem(props, per_sm, regs)
        return cls(blocks, False if problem else None, start, problem, regs_per_thread=regs,
                   c_hold=_checked_c_hold(torch, compiled, blocks, start))

    def verify(self, torch: Any) -> bool:
        """Probe once (later calls return the first answer): a one-thread kernel on a second stream,
        launched right behind a hold, must start after it ended (:func:`_probe`)."""
        if self.verified is None:
            gap = _probe(torch, self.start, self.blocks)
            self.probe_gap_ms, self.verified_by = gap, "worker"
            self.verified = gap >= -0.01
            if not self.verified:
                self.reason = (f"a kernel on another stream started {-gap:.3f} ms before the hold ended: "
                               "the hold does not fill the GPU")
        return bool(self.verified)

    @classmethod
    def build(cls, torch: Any, device: str) -> "LaunchBudget":
        """:meth:`prepare` then :meth:`verify`."""
        budget = cls.prepare(torch, device)
        budget.verify(torch)
        return budget


def blocks_to_fill(props: Any) -> tuple[int, int]:
    """(grid size, blocks per SM) that take every thread slot of every SM of a device."""
    per_sm = int(getattr(props, "max_threads_per_multi_processor", 0) or 2048) // THREADS_PER_BLOCK
    return int(props.multi_processor_count) * per_sm, per_sm


def fit_problem(props: Any, per_sm: int, regs_per_thread: int | None) -> str | None:
    """Why ``per_sm`` hold blocks cannot all be resident on one SM at once (None: they can)."""
    if per_sm > 32:  # resident blocks per SM on every NVIDIA GPU since Maxwell
        return f"{per_sm} blocks an SM exceed the 32 resident blocks an SM can hold"
    limit = int(getattr(props, "regs_per_multiprocessor", 0) or 65536)
    if regs_per_thread is not None and regs_per_thread * THREADS_PER_BLOCK * per_sm > limit:
        return (f"the hold uses {regs_per_thread} registers a thread: {per_sm} blocks of {THREADS_PER_BLOCK} "
                f"threads need {regs_per_thread * THREADS_PER_BLOCK * per_sm}, an SM has {limit}")
    return None


def _launch(start: Any, blocks: int, ms: float) -> Any:
    start[:1].zero_()
    return _hold_kernel[(blocks,)](start, int(ms * 1e6), num_warps=THREADS_PER_BLOCK // 32)


def _checked_c_hold(torch: Any, compiled: Any, blocks: int, start: Any) -> Any:
    """The hold through :func:`_c_launcher`, if one 1-microsecond launch that way publishes its
    start and adds to the spin sums; else None (the JIT's path)."""
    c = _c_launcher(compiled)
    if c is None:
        return None
    ptr = int(start.data_ptr())
    try:
        start.zero_()
        c(blocks, ptr, 1000)
        torch.cuda.synchronize(start.device)
        ok = int(start[0]) != 0 and int(start[2]) >= 1000
        start.zero_()
    except Exception:  # noqa: BLE001 - another Triton's launcher
        return None
    return (lambda ns: c(blocks, ptr, ns)) if ok else None


def _n_regs(compiled: Any) -> int | None:
    try:
        compiled._init_handles()  # n_regs is filled in when the binary is loaded
    except Exception:  # noqa: BLE001 - an older/newer Triton: then only the probe decides
        pass
    n = getattr(compiled, "n_regs", None)
    return int(n) if isinstance(n, int) and n > 0 else None


@triton.jit
def _stamp_kernel(out_ptr):
    tl.store(out_ptr, _now())


def _probe(torch: Any, start: Any, blocks: int) -> float:
    """Hold for ``PROBE_MS`` on the current stream, then a one-thread kernel on a second stream that
    stamps the time it started (``%globaltimer``); returns, over three tries, the least of the
    stamp minus the hold's end (its published start + ``PROBE_MS``), in ms: negative when the probe
    started beside the hold.

    Both times come from the GPU's global timer, inside kernels: the question asked directly (two
    CUDA events, as a probe once compared, answer it only indirectly). Either way a probe is only conclusive when no
    other process's kernel time-slices the GPU meanwhile: with one beside it, a probe kernel can
    start beside a hold that fills the GPU (tests/benchmarks/diagnostics/hold_probe_under_load.py,
    H100: a tiny kernel every 1 ms beside it failed 2 of 30 event probes and 6 of 10 stamp probes;
    none failed alone). Hence :func:`device_verdict`, asked in the grader's exclusive section."""
    side = torch.cuda.Stream()
    stamp = torch.zeros(1, dtype=torch.int64, device="cuda")
    ns = int(PROBE_MS * 1e6)
    gaps = []
    for _ in range(3):
        torch.cuda.synchronize()
        _launch(start, blocks, PROBE_MS)
        with torch.cuda.stream(side):
            _stamp_kernel[(1,)](stamp)
        torch.cuda.synchronize()
        gaps.append((int(stamp.item()) - (int(start[0].item()) + ns)) / 1e6)
    return min(gaps)


_VERDICTS: dict[str, dict[str, Any]] = {}
_REFUSED: dict[str, tuple[float, dict[str, Any]]] = {}
_PREPARED: dict[str, LaunchBudget] = {}
_VERDICT_LOCK = threading.Lock()
REFUSAL_TTL_S = 30.0
"""How long a probed refusal stands before the next evaluation's load probes again (a refusal by
:meth:`LaunchBudget.prepare`'s own arithmetic, which no probe can change, stands for good)."""
DEVICE_PROBES = 5
"""Probes (each the least gap of three) the grader makes before it reports a hold as not filling the
device. Even in the exclusive section a spare worker starting up launches a few kernels outside the
gate, and one such time-slice made the grader's single probe fail: every evaluation of that grader
then timed without the hold (seen in one A/B arm on an H100). A hold that fills the GPU passes
any probe nothing interrupts; one that does not fails every such probe, so a pass is kept for the
grader's life and a refusal for :data:`REFUSAL_TTL_S` (then a load probes again). The residual
risk: a leaky hold passing because a time-slice held the probe back past the hold's end; the
timing's side-stream check still sees side-stream work by the host's clock."""


def prepare_device(torch: Any, device: str) -> LaunchBudget | None:
    """The grader's hold for ``device``, compiled and sized once (Triton's compiler and one launch of
    a few microseconds: call it in the GPU gate's shared section, not the exclusive one); None when
    it cannot be built."""
    with _VERDICT_LOCK:
        if device not in _PREPARED:
            try:
                with torch.cuda.device(device):
                    _PREPARED[device] = LaunchBudget.prepare(torch, device)
            except Exception:  # noqa: BLE001 - no hold here: workers probe for themselves
                return None
            if _PREPARED[device].verified is False:  # its own arithmetic refused it: no probe changes that
                _REFUSED[device] = (float("inf"), _PREPARED[device].verdict())
        return _PREPARED[device]


def known_verdict(device: str) -> tuple[bool, dict[str, Any] | None]:
    """``(True, verdict)`` when :func:`device_verdict` need not probe: a pass (kept for the process's
    life), a refusal younger than :data:`REFUSAL_TTL_S` or one from the hold's own arithmetic."""
    if device in _VERDICTS:
        return True, _VERDICTS[device]
    refused = _REFUSED.get(device)
    if refused is not None and (refused[0] == float("inf") or time.monotonic() < refused[0]):
        return True, refused[1]
    return False, None


def device_verdict(torch: Any, device: str) -> dict[str, Any] | None:
    """The hold of :func:`prepare_device` probed in this process (the grader's, which calls it while
    it holds the GPU exclusively: no other process's kernel time-slices the probe), as
    :meth:`LaunchBudget.verdict`: up to :data:`DEVICE_PROBES` probes, a pass kept for good, a refusal
    for :data:`REFUSAL_TTL_S`; None when it could not be probed (workers then probe themselves).

    Why not each worker at load: the load runs in the GPU gate's shared section, beside other
    evaluations' kernels. When another context's work time-slices the GPU, a kernel on a second stream
    can start beside a hold that fills the GPU (tests/benchmarks/diagnostics/hold_probe_under_load.py:
    GPU-timer stamps, 1-6 of 10 probes with a busy neighbour, none alone); the worker then timed
    without the hold, and a two-launch matmul's median moved by up to 5% between evaluations (the
    host's launch gap between its kernels counted). Whether the hold fills the GPU depends on the
    device and the compiled hold, not on the process: workers whose hold has the same grid and
    register count adopt this answer (:meth:`LaunchBudget.adopt`)."""
    known, verdict = known_verdict(device)
    if known:
        return verdict
    budget = prepare_device(torch, device)
    if budget is None:
        return None
    with _VERDICT_LOCK:  # one probe at a time in this process (the grader's gate orders evaluations)
        known, verdict = known_verdict(device)
        if known:
            return verdict
        try:
            with torch.cuda.device(device):
                for _ in range(DEVICE_PROBES):
                    budget.verified, budget.reason = None, None
                    budget.verify(torch)
                    if budget.verified:
                        break
        except Exception:  # noqa: BLE001 - no verdict: each worker probes for itself
            budget.verified = None
            return None
        verdict = budget.verdict()
        if verdict["verified"]:
            _VERDICTS[device] = verdict  # kept: a pass is a property of the device and the hold
        else:
            _REFUSED[device] = (time.monotonic() + REFUSAL_TTL_S, verdict)
        return verdict
