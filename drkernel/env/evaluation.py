"""Grading one candidate: :class:`Evaluation`, and ``evaluate(task, source, *, seed, config)``.

An evaluation reads top to bottom (:meth:`Evaluation.run`)::

    grader process                                   candidate's process (warm spare, own process group)
    --------------------------------------------     -------------------------------------------------
    static checks on the candidate's AST
    prepare: task loaded once (PreparedTask);
      reference outputs of every correctness
      trial, before any candidate code runs
    acquire a process  ------------------------->    (started ahead: torch, triton, CUDA context up)
    load  (kernel-name suffix, reference's       ->  confine (Landlock), audit hook + guards, state
           parameter shapes)                         fingerprint, CUDA profiler on; import the
                                                     candidate; ModelNew under the same init seed
    correctness trials: seed, distribution,     ->  fresh parameters from the reload seed, inputs
      grad mode, reload seed                         drawn from the seed, garbage pre-fill, fenced
    judge against the float64 oracle            <-   call, output; audit findings
      (drkernel.env.judge.precision)
    determinism: trial 1 again, other garbage
    [GPU gate, exclusive]
      reference timing: cached, or measured now in
        a clean worker (drkernel.env.measure.reference_timing)
      timed calls: seeds, factors, reload seeds ->  warm-up + timed calls, each fenced
        keep this output?  (decided now)        <-   after each timed call
                                                <-   device records, kept outputs
    spot checks of the kept outputs
    attribution: per-call windows from the device records: time, own-kernel share (coverage),
      device-to-host copies, side streams, own launches (drkernel.env.measure.attribution)
    verdict (one place), feedback; close: the process is killed and discarded

The candidate never sees a seed before the request that uses it, never holds a reference output or
a reference model (neither exists in its process), never learns which timed calls are checked, and
never computes its own verdict or its own time. Its inputs are drawn in its process with the
grader's code from the seed, so no input tensor is shipped; only its outputs come back.

Faults: what the candidate does (raises, hangs, crashes, floods, exhausts memory, sends garbage) is
its verdict, at the stage it was in; an unusable task raises TaskError; a failure of the grader
itself (the reference's timing included) raises EnvironmentFailure; a cancelled evaluation raises
:class:`EvaluationCancelled`.
"""

from __future__ import annotations

import contextlib
import functools
import os
import statistics
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator

import numpy as np
import torch

from drkernel.env.measure import gpu_clock
from drkernel.env.measure import reference_timing
from drkernel.env.measure.attribution import CallWindow, ForgedRecords, coverage_of, cut_windows, own_outside_windows, top_kernels
from drkernel.env.judge.compare import CONDITION_ULPS, Comparison, compare_outputs, reference_rms
from drkernel.env.config import EvalConfig
from drkernel.env.judge.feedback import build_feedback
from drkernel.env.measure.gate import DeviceGate, Lease
from drkernel.env.judge.precision import judge, near_miss
from drkernel.env.judge.precision import policy as precision_policy
from drkernel.env.tasks.prepared import PreparedTask, ReferenceOutput, TrialKey
from drkernel.env.measure.profiling import UNBOUNDED
from drkernel.env.protocol import EventsRequest, LoadRequest, Reply, RunRequest, TimeRequest
from drkernel.env.result import EnvironmentFailure, EvalError, EvalResult, Stage
from drkernel.env.measure.spot import sample_index, sample_size
from drkernel.env.process.staging import reserve_bytes
from drkernel.env.measure.timing import WORKER_PHASES
from drkernel.env.process.sandbox import CandidateFailure, CandidateProcess
from drkernel.env.guards.static_checks import check_source
from drkernel.env.tasks.task import SCALE_ENDS, Task, TaskError, trial_seeds
from drkernel.env.process.tensor_io import TensorIOError, read_tensor

GRAD_MODES = ("no_grad", "enable_grad", "inference_mode")


CHECK_ALL_TIMED = 5
"""At most this many timed calls (the CPU's quick protocol has 3): every timed output is checked."""


class EvaluationCancelled(Exception):
    """The evaluation was cancelled from outside; its candidate process was killed."""


class CancelToken:
    """Cancels one evaluation from any thread: kills its process group, ends its wait."""

    def __init__(self) -> None:
        self._event = threading.Event()
        self._callbacks: list[Callable[[], None]] = []
        self._lock = threading.Lock()

    @property
    def cancelled(self) -> bool:
        return self._event.is_set()

    def on_cancel(self, fn: Callable[[], None]) -> None:
        with self._lock:
            if not self._event.is_set():
                self._callbacks.append(fn)
                return
        fn()

    def cancel(self) -> None:
        with self._lock:
            self._event.set()
            callbacks, self._callbacks = self._callbacks, []
        for fn in callbacks:
            fn()

    def wait(self, timeout: float) -> bool:
        return self._event.wait(timeout)


# -- process-wide resources -------------------------------------------------------------------------
_GATES: dict[str, DeviceGate] = {}
_GATES_GUARD = threading.Lock()


SHORT_OF_MEMORY = 0.25
"""The grader gives the idle part of its CUDA cache (reserved, not allocated) back (``empty_cache``)
when less than this share of the device is free, or when that idle part exceeds
:data:`GRADER_CACHE_SHARE` of the device, and never when it is below :data:`IDLE_FLOOR`: emptying
frees memory with ``cudaFree``, which waits for the whole device, so it is not done after every
evaluation nor for a few blocks; the cap keeps what a candidate can allocate from depending much on
what the grader did before."""
GRADER_CACHE_SHARE = 0.2
IDLE_FLOOR = 0.02
"""Idle cache below this share of the device is not worth a wait for the whole device (on an H100
at 8 evaluations in flight the device was short of memory most of the time, and the grader emptied
its cache ~40 times in 32 evaluations, 0.05-0.2 s each, with every other evaluation's work stalled
behind it). The price: while the device is short, up to this share of it (1.6 GB of an H100) may
stay in the grader's cache instead of going to a candidate."""


def _release_if_short(device: str) -> None:
    dev = torch.device(device)
    idle = torch.cuda.memory_reserved(dev) - torch.cuda.memory_allocated(dev)
    free, total = torch.cuda.mem_get_info(dev)
    if idle > IDLE_FLOOR * total and (free < SHORT_OF_MEMORY * total or idle > GRADER_CACHE_SHARE * total):
        torch.cuda.empty_cache()


_STREAMS_GUARD = threading.Lock()
_FREE_STREAMS: dict[str, list[Any]] = {}


@contextlib.contextmanager
def _evaluation_stream(device: str) -> Iterator[Any]:
    """The current stream of one evaluation's thread: not used by another evaluation in flight,
    and given back for later evaluations. The caching allocator reuses freed memory only on the
    stream it was allocated on: ``torch.cuda.Stream()`` per evaluation hands out torch's pooled
    streams in rotation (32 per device), so each evaluation's freed memory waited for the rotation
    to come back, the cache grew by an evaluation's peak per evaluation until it was emptied, and
    emptying it (``cudaFree`` waits for the device) stalled every evaluation. (Beyond 32 evaluations
    in flight, two entries here may be the same CUDA stream: their work serialises, still correct.)"""
    with _STREAMS_GUARD:
        free = _FREE_STREAMS.setdefault(device, [])
        stream = free.pop() if free else torch.cuda.Stream(device)
    try:
        with torch.cuda.stream(stream):
            yield stream
    finally:
        with _STREAMS_GUARD:
            _FREE_STREAMS[device].append(stream)


def device_gate(device: str) -> DeviceGate | None:
    """The process-wide gate of a GPU (None on CPU: CPU timings run concurrently, one core each)."""
    if not device.startswith("cuda"):
        return None
    with _GATES_GUARD:
        return _GATES.setdefault(device, DeviceGate())


_TF32_LOCK = threading.Lock()
_TF32_STATE: dict[str, Any] = {"active": 0, "saved": None}


@contextlib.contextmanager
def _fp32_exact() -> Iterator[None]:
    """TF32 off for the reference's matmuls and convolutions while any evaluation runs, and the
    caller's settings restored when the last one ends (ref-counted across threads)."""
    with _TF32_LOCK:
        if _TF32_STATE["active"] == 0:
            _TF32_STATE["saved"] = (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32)
        _TF32_STATE["active"] += 1
        torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    try:
        yield
    finally:
        with _TF32_LOCK:
            _TF32_STATE["active"] -= 1
            if _TF32_STATE["active"] == 0:
                torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = _TF32_STATE["saved"]


def _clip(text: str, limit: int = 2000) -> str:
    """Keep the head (what failed) and the tail (the exception), drop the middle."""
    text = text.strip()
    if len(text) <= limit:
        return text
    head = limit // 3
    return text[:head] + " ... " + text[-(limit - head - 5):]


def resolve_device(device: str) -> str:
    """``cuda`` -> ``cuda:<current>``; checks that CUDA is there (EnvironmentFailure otherwise)."""
    if device == "cpu":
        return device
    if not torch.cuda.is_available():
        raise EnvironmentFailure(f"device {device!r} requested but torch.cuda.is_available() is False")
    return f"cuda:{torch.cuda.current_device()}" if device == "cuda" else device


class _Stop(Exception):
    """Internal: the verdict is decided, stop running stages."""


@dataclass
class Plan:
    """Every hidden seed of one evaluation, derived from its master seed (drawn from the OS when
    the caller gives none)."""

    init_seed: int
    trials: list[tuple[str, int, str, int | None]]  # (distribution, seed, grad mode, reload seed)
    seeds: list[int]
    """Inputs of the warm-up and timed calls."""
    factors: list[float]
    reloads: list[int]
    kernel_suffix: str

    @classmethod
    def make(cls, prepared: PreparedTask, config: EvalConfig, seed: int) -> "Plan":
        dists = prepared.loaded.allowed_distributions(config.distributions)
        n = config.trials_per_distribution
        seeds = []
        for d in dists:
            drawn = trial_seeds(seed, n, f"correctness-{d}")
            if d == "scaled":  # the ends of the scale range first, every time (task.SCALE_ENDS), then draws
                ends = sorted(SCALE_ENDS, reverse=True)[:n]  # scaled_max (overflow) before scaled_min
                seeds += [(e, trial_seeds(seed, 1, f"correctness-{e}")[0]) for e in ends]
                drawn = drawn[len(ends):]
            seeds += [(d, s) for s in drawn]
        reloads = trial_seeds(seed, len(seeds), "correctness-params")
        # trial 1 uses the parameters as built; every later trial loads fresh values
        trials = [(d, s, GRAD_MODES[k % len(GRAD_MODES)], None if k == 0 else reloads[k])
                  for k, (d, s) in enumerate(seeds)]
        negatable = "negated" in prepared.loaded.allowed_distributions(("negated",))
        tseeds, factors, treloads = reference_timing.calls_plan(seed, config, negatable, "timing")
        return cls(init_seed=trial_seeds(seed, 1, "init")[0], trials=trials, seeds=tseeds, factors=factors,
                   reloads=treloads, kernel_suffix=f"__dk{os.urandom(4).hex()}")

    def timed_key(self, call: int) -> tuple[TrialKey, int]:
        return TrialKey(self.seeds[call], "native", self.factors[call]), self.reloads[call]


@dataclass
class StageClock:
    """Seconds per part of the evaluation (``details["stage_seconds"]``)."""

    seconds: dict[str, float] = field(default_factory=dict)
    _open: list[list[float]] = field(default_factory=list, repr=False)  # per open part: seconds queued in it

    @contextlib.contextmanager
    def part(self, name: str) -> Iterator[None]:
        t0 = time.monotonic()
        self._open.append(queued := [0.0])
        try:
            yield
        finally:
            self._open.pop()
            self.add(name, time.monotonic() - t0 - queued[0])

    def add(self, name: str, s: float) -> None:
        self.seconds[name] = round(self.seconds.get(name, 0.0) + s, 4)

    QUEUE = "gpu_queue"

    def queued(self, s: float) -> None:
        """Seconds spent waiting for the GPU (``gpu_queue``), not in the parts open meanwhile."""
        self.add(self.QUEUE, s)
        for q in self._open:
            q[0] += s


ProcessSource = Callable[[str, float], CandidateProcess]


def _close_process(proc: CandidateProcess) -> None:
    proc.close()


def fresh_process(device: str, timeout_s: float) -> CandidateProcess:
    """A newly started candidate process (no warm pool)."""
    proc = CandidateProcess(device)
    proc.warm = False  # type: ignore[attr-defined]
    return proc.wait_ready(timeout_s)


class Evaluation:
    """One candidate against one prepared task. ``Evaluation(...).run()`` returns the EvalResult.

    ``acquire(device, timeout_s)`` supplies worker processes (warm spares, or fresh ones: one for
    the candidate, and one for the reference when its timing is not cached); ``release(proc)``
    disposes of one when done (default ``proc.close()``; a grader's pool kills it at once and
    reaps it in the background, :meth:`~drkernel.env.process.sandbox.WarmPool.discard`); ``gate`` is the
    device's :class:`DeviceGate` (default: the process-wide one of the device; None on CPU): timing
    holds it exclusively, other GPU work shares it; ``cancel`` ends the evaluation from another
    thread (EvaluationCancelled).
    """

    def __init__(self, prepared: PreparedTask, source: str, *, seed: int | None, config: EvalConfig,
                 acquire: ProcessSource = fresh_process, gate: DeviceGate | None | str = "default",
                 cancel: CancelToken | None = None,
                 release: Callable[[CandidateProcess], None] | None = None):
        self.prepared = prepared
        self.source = source
        self.seed = seed if seed is not None else int.from_bytes(os.urandom(8), "little") >> 1
        self.config = config
        self.device = prepared.device
        self.cuda = prepared.device.startswith("cuda")
        self._acquire_fn = acquire
        self._release_fn = release or _close_process
        self.gate = device_gate(prepared.device) if gate == "default" else gate
        self.cancel = cancel or CancelToken()
        self.result = EvalResult(details={"task": prepared.task.name, "device": config.device,
                                          "task_size": prepared.task_size})
        self.clock = StageClock()
        self.stage: Stage = Stage.STATIC
        self.entered: list[Stage] = []
        self.completed: set[Stage] = set()
        self.trials_ok: bool | None = None
        self.proc: CandidateProcess | None = None
        self.plan: Plan | None = None
        self.atol, self.rtol = prepared.loaded.tolerance(config.atol, config.rtol)
        name = config.precision or prepared.loaded.precision() or "reference"
        self.policy = precision_policy(name)
        self.result.details["precision"] = {"policy": name, "rule": self.policy.rule}
        self._t0 = time.monotonic()
        self._deadline = self._t0 + config.total_timeout_s
        self._first_out: torch.Tensor | None = None
        self._run_replies: list[Any] = []
        self._calls = 0  # calls the candidate's worker made (each bracketed by fences on a GPU)
        self._buffers = True
        self._windows: list[CallWindow] | None = None
        self._ref_cost = 0.0
        self._clock_samples: list[dict[str, Any] | None] = []  # SM clock when the timing opened and ended
        self._budget_verdict: dict[str, Any] | None = None  # the hold's probe on this device (_hold_verdict)
        self._gate_holds: list[tuple[str, float]] = []  # (side, seconds held), outermost entries only
        self._gate_depth = 0
        self._aside_s = 0.0  # seconds stepped aside for waiting timings (DeviceGate.step_aside)

    # -- the flow ----------------------------------------------------------------------------------
    def run(self) -> EvalResult:
        try:
            # The grader's own GPU work (references, reads, comparisons) on a stream of this
            # evaluation's: on the one default stream every read waited for every other thread's work.
            with _fp32_exact(), (_evaluation_stream(self.device) if self.cuda else contextlib.nullcontext()):
                self._flow()
        except _Stop:
            pass
        except CandidateFailure as exc:
            if exc.kind == "cancelled" or self.cancel.cancelled:
                raise EvaluationCancelled(f"evaluation of {self.prepared.task.name} was cancelled") from None
            tail = f"\n{exc.output_tail.strip()[-1500:]}" if exc.output_tail.strip() else ""
            if exc.kind == "forged":
                self._finding("harness_tampered", f"the worker's channel: {exc.message}")
            self._fail(self.stage, f"{exc.message}{tail}")
            # What ended the candidate's process (timeout, crash, memory, flood, protocol): callers
            # that store verdicts use it (a timeout under load is not a property of the kernel).
            self.result.details["failure_kind"] = exc.kind
        finally:
            self._close()
        if self.cancel.cancelled:
            raise EvaluationCancelled(f"evaluation of {self.prepared.task.name} was cancelled")
        return self._verdict()

    def _flow(self) -> None:
        self._static()
        self.plan = Plan.make(self.prepared, self.config, self.seed)
        self.prepared.use(self.plan.init_seed)  # its models stay while it runs (forget at the close)
        self._acquire()  # a warm worker: no candidate code has run in it
        # the compiler (CPU only, no GPU ever) works beside the references and the load
        self._start_compiler(self._write_candidate())
        self._references()
        self._enter(Stage.COMPILE)
        self._load()
        self._precompile()
        self._enter(Stage.CORRECTNESS)
        try:
            self._correctness()
            self._determinism()
        finally:
            self._launch_flags_cpu()  # launch rules also over the calls of a failed run (hack flags)
        self.completed.add(Stage.CORRECTNESS)
        self._enter(Stage.LAUNCHES)
        self.completed.add(Stage.LAUNCHES)
        if self._worth_timing():
            ref_proc = self._reference_process()
            with self._exclusive() as lease:
                self._enter(Stage.TIMING)
                ref = self._reference_timing(ref_proc)
                reply = self._timed_calls(lease)
            events = self._records(Stage.TIMING)  # (outside the gate: the next timing need not wait for it)
            self._timing(reply, ref, events)
        elif not (self.config.profile and self.result.error is None and bool(self.trials_ok)
                  and (not self.result.hacked or self.config.time_hacked)):
            return
        elif self.cuda:  # no timing: the device records of the correctness calls
            events = self._records(Stage.PROFILING)
        else:
            events = None  # CPU: the correctness calls' torch work came with their replies
        if not self.config.profile:
            return
        self._enter(Stage.PROFILING)
        self._attribute(events)
        self.completed.add(Stage.PROFILING)

    # -- stages ------------------------------------------------------------------------------------
    def _static(self) -> None:
        self._enter(Stage.STATIC)
        report = check_source(self.source, self.prepared.task.entry_point)
        for problem in (report.syntax_error, report.missing_class):
            if problem:
                self._fail(Stage.COMPILE, problem)
                raise _Stop
        self.result.details["static"] = report.messages()
        self.result.details["kernels_defined"] = report.kernels
        for f in report.findings:
            self._finding(f.id, f"line {f.line}: {f.message}" if f.line else f.message)
        self.completed.add(Stage.STATIC)

    def _references(self) -> None:
        """Every reference output the correctness trials compare against, before any candidate
        code can reach the GPU (a candidate that fills GPU memory cannot break them; only the
        compiler, which never has a GPU, may run meanwhile). The reference is built on the CPU
        outside the GPU gate; each trial's output is one piece of shared work (a timing that
        waits meanwhile runs between two trials)."""
        plan = self.plan
        with self.clock.part("reference_build"):
            self.prepared.prebuild(plan.init_seed)
        self.refs = {}
        with self._shared():
            for k, (d, s, _, r) in enumerate(plan.trials):
                if k:
                    self._step_aside()
                with self.clock.part("references"):
                    self.refs[("trial", k)] = self.prepared.reference(plan.init_seed, TrialKey(s, d), r)
            with self.clock.part("references"):
                if not self.cuda:
                    self._ref_cost = self.prepared.reference_cost(plan.init_seed, TrialKey(plan.trials[0][1], "native"))
                else:
                    _release_if_short(self.device)  # the inputs drawn here: their memory, when the workers need it

    def _acquire(self) -> None:
        t0 = time.monotonic()
        with self.clock.part("process_start"):
            self.proc = self._acquire_fn(self.device, max(120.0, self.config.load_timeout_s))
        self._deadline += time.monotonic() - t0  # starting a worker is the grader's time, not the candidate's
        self.proc.set_limits(self.config.memory_limit_mb, self.config.output_limit_bytes)
        self.result.details["warm_process"] = bool(getattr(self.proc, "warm", False))
        self._cpu_start = (self.proc.cpu_seconds(), self.proc.thread_run_ns())  # before any candidate code
        self.cancel.on_cancel(self.proc.kill)
        self._check_cancel()

    def _stage_bytes(self) -> int:
        """The output stage this evaluation reads (:func:`drkernel.env.process.staging.reserve_bytes`): one
        correctness output, or the kept outputs of the timing request (whole or sampled)."""
        out = self.refs[("trial", 0)].out
        cfg = self.config
        kept = cfg.timing_trials if cfg.timing_trials <= CHECK_ALL_TIMED else cfg.spot_checks
        sampled = sample_size(out.numel(), cfg.spot_sample) or out.numel()
        return reserve_bytes(out.numel() * out.element_size(), kept, sampled * out.element_size())

    def _write_candidate(self) -> Any:
        cand = self.proc.workdir / "candidate.py"
        cand.write_text(self.source, encoding="utf-8")
        return cand

    def _hold_verdict(self) -> dict[str, Any] | None:
        """The launch budget's hold probed by this process in the GPU gate's exclusive section (no
        other evaluation's kernel time-slices the probe), once per device while it passes; compiled
        and sized before, in the shared section (Triton's compiler must not hold the GPU alone).
        Called outside any gate section. See :func:`drkernel.env.measure.budget.device_verdict`."""
        if not self.cuda or self.config.launch_budget_ms <= 0:
            return None
        from drkernel.env.measure import budget

        known, verdict = budget.known_verdict(self.device)
        if known:
            return verdict
        with self._shared():
            if budget.prepare_device(torch, self.device) is None:
                return None
        with self._gate("exclusive"):
            torch.cuda.synchronize(self.device)
            return budget.device_verdict(torch, self.device)

    def _load(self) -> None:
        cand = self.proc.workdir / "candidate.py"
        task = self.prepared.task
        params, buffers = self.prepared.shapes(self.plan.init_seed)
        stage_bytes = 0
        if self._stage() is not None:
            with self.clock.part("stage_map"):
                stage_bytes = self._stage().reserve(self._stage_bytes(), cuda=self.cuda)
        self._budget_verdict = self._hold_verdict()  # before the load's own gate section
        load = functools.partial(
            LoadRequest, role="candidate", task_source=task.source, task_name=task.name, candidate_file=str(cand),
            device="cuda" if self.cuda else "cpu", task_size=self.prepared.task_size,
            entry_point=task.entry_point, init_seed=self.plan.init_seed, kernel_suffix=self.plan.kernel_suffix,
            parameter_shapes=params, buffer_shapes=buffers, launch_budget_ms=self.config.launch_budget_ms,
            stage_bytes=stage_bytes, launch_budget_verdict=self._budget_verdict)
        # The load's host work (the task, the profiler's start, the confinement: no kernel, no
        # candidate code) outside the GPU gate, where a waiting timing does not wait for it; the rest
        # in its shared side. In one request when the worker would probe the hold itself (a kernel).
        if not self.cuda or self.config.launch_budget_ms <= 0 or self._budget_verdict is not None:
            reply = self._request(load(part="prepare"), self.config.load_timeout_s, "load_prepare", gated=False)
            self._worker_parts("load", reply.body.phases_s)
            reply = self._request(load(part="candidate"), self.config.load_timeout_s, "load_compile")
        else:
            reply = self._request(load(), self.config.load_timeout_s, "load_compile")
        self.result.compiled = True
        self._worker_parts("load", reply.body.phases_s)
        self.completed.add(Stage.COMPILE)
        self.result.details["isolation"] = reply.body.isolation
        self._buffers = bool(reply.body.buffers_reloaded)
        if not self._buffers and buffers:
            with self._shared():  # the candidate's buffers differ from the reference's: not reloaded
                self.refs = {("trial", k): self.prepared.reference(self.plan.init_seed, TrialKey(s, d), r, False)
                             for k, (d, s, _, r) in enumerate(self.plan.trials)}

    def _start_compiler(self, candidate_file: Any) -> None:
        """On a GPU: fork the compiler for this worker's directory from its zygote
        (:mod:`drkernel.env.process.precompile`), to run beside the references and the load (it never has
        a GPU: the references are still computed before any candidate code can reach one). None
        when off, or for a worker started by exec; a zygote that cannot fork one only means the
        first call compiles."""
        self._compiler = None
        if not self.cuda or self.config.precompile_timeout_s <= 0:
            return
        from drkernel.env.process.precompile import cuda_target, job

        task = self.prepared.task
        t0 = time.monotonic()
        try:
            with self.clock.part("precompile_start"):
                self._compiler = self.proc.start_compiler(job(
                    candidate_file=str(candidate_file), task_source=task.source, task_name=task.name,
                    entry_point=task.entry_point, task_size=self.prepared.task_size, init_seed=self.plan.init_seed,
                    kernel_suffix=self.plan.kernel_suffix, target=cuda_target(self.device),
                    timeout_s=self.config.precompile_timeout_s))
            reason = None if self._compiler is not None else "workers start by exec: no zygote to fork a compiler"
        except Exception as exc:  # noqa: BLE001 - no compiler: the first call compiles
            reason = f"no compiler: {type(exc).__name__}: {exc}"[:200]
        self._deadline += time.monotonic() - t0  # (a zygote's restart is the grader's time, not the candidate's)
        if reason:
            self.result.details["precompile"] = {"finished": False, "complete": False, "reason": reason}

    def _precompile(self) -> None:
        """On a GPU: wait for the compiler (:mod:`drkernel.env.process.precompile`) outside the GPU gate,
        while the worker is idle with its device synchronised, then kill its process group. The
        first call then loads the kernels instead of compiling them in the gate's shared side.
        Diagnostics only, never a verdict."""
        compiler, self._compiler = getattr(self, "_compiler", None), None
        if compiler is None:
            return
        if not self.proc.alive:  # nothing to compile for (and nobody counting its memory)
            compiler.kill("its worker ended")
        with self.clock.part("precompile"):
            self.result.details["precompile"] = compiler.wait(
                min(self.config.precompile_timeout_s, max(self._deadline - time.monotonic(), 0.0)))
        self._check_cancel()

    def _correctness(self) -> None:
        details: list[dict[str, Any]] = []
        self.result.details["trials"] = details
        self.trials_ok = False
        for k, (dist, tseed, grad, reload) in enumerate(self.plan.trials):
            ok, out, err = self._checked_call(RunRequest(seed=tseed, distribution=dist, grad_mode=grad, prefill="nan",
                                                         out_name=f"t{k}", reload_seed=reload),
                                              self.refs[("trial", k)], f"trial {k + 1}")
            details.append({"distribution": dist, "grad_mode": grad, "fresh_parameters": reload is not None,
                            "ok": ok, **({"error": err} if not ok else {})})
            if k == 0:
                self._first_out = out
            if not ok:
                raise _Stop
        self.trials_ok = True

    def _determinism(self) -> None:
        """Trial 1 again with memory pre-filled by a different garbage pattern (stale reads)."""
        if not self.config.determinism_check or self._first_out is None:
            return
        dist, tseed, _, reload = self.plan.trials[0]
        ref = self.refs[("trial", 0)]
        ok, out, _ = self._checked_call(RunRequest(seed=tseed, distribution=dist, grad_mode="no_grad",
                                                   prefill="pattern", out_name="det", reload_seed=reload),
                                        ref, "determinism re-run")
        same = ok and out is not None and self._compare(out, self._first_out).ok
        if not same:
            self.trials_ok = False
            self._finding("stale_memory", "the output changed when freed memory held different garbage")
            self._fail(Stage.CORRECTNESS, "output changes when memory is pre-filled with different garbage "
                       "(reads of uninitialised or stale memory)")
            raise _Stop

    def _launch_flags_cpu(self) -> None:
        """On the CPU interpreter, launches are counted in the worker (on a GPU: the device records)."""
        runs = self._run_replies
        if self.cuda or not runs:
            return
        counts = [r.launches for r in runs]
        if all(c == 0 for c in counts):
            self._finding("no_triton_launch", "no checked call launched one of your kernels")
        elif any(c == 0 for c in counts):
            self._finding("launch_inconsistent", f"own launches per checked call: {counts}")

    def _reference_process(self) -> CandidateProcess | None:
        """A worker for the reference's timing when none is cached (started outside the GPU's
        exclusive section, so a cold start does not hold other evaluations' timing)."""
        if reference_timing.lookup(self.prepared, self.config) is not None:
            return None
        t0 = time.monotonic()
        with self.clock.part("process_start"):
            proc = self._acquire_fn(self.device, max(120.0, self.config.load_timeout_s))
        self._deadline += time.monotonic() - t0
        self.cancel.on_cancel(proc.kill)
        return proc

    def _reference_timing(self, proc: CandidateProcess | None) -> Any:
        ref = reference_timing.lookup(self.prepared, self.config)
        if ref is not None:
            if proc is not None:
                self._release_fn(proc)
            self.result.details["reference_cached"] = True
            return ref
        if proc is None:
            proc = self._acquire_fn(self.device, max(120.0, self.config.load_timeout_s))
        with self.clock.part("reference_timing"):
            ref = reference_timing.measure(self.prepared, self.config, proc, hold_verdict=self._budget_verdict,
                                               release=self._release_fn)
        self._deadline += ref.seconds  # the reference's time is the grader's, not the candidate's
        reference_timing.store(self.prepared, self.config, ref)
        self.result.details["reference_cached"] = False
        return ref

    def _timed_calls(self, lease: Lease | None) -> Any:
        """The warm-up and timed calls; after the last one has returned (its device work is done),
        the GPU is downgraded to shared for the rest of the request (kept outputs copied back): no
        other timing overlaps it, other evaluations' shared work may. The profiler runs on: its
        records are read after the gate is let go (:meth:`_records`)."""
        plan, cfg = self.plan, self.config
        rng = np.random.default_rng(int.from_bytes(os.urandom(8), "little"))  # never derived from the seed
        kept: dict[int, tuple[int, int]] = {}  # checked call -> (seed, size) of the elements read back
        size = sample_size(self.refs[("trial", 0)].out.numel(), cfg.spot_sample)
        last = cfg.warmup + cfg.timing_trials - 1
        # With a handful of timed calls a cheap wrong output on a majority of them moves the median,
        # and a random sample of one or two misses that often: then every timed output is checked.
        every = cfg.timing_trials <= CHECK_ALL_TIMED

        asked: list[int] = []

        def keep(call: int) -> tuple[int, int] | None:
            """Decided after the call returned: the candidate cannot know which calls are checked,
            nor, before its call is over, which elements of the output are read."""
            asked.append(call)
            if self.cuda and call == last and len(self._clock_samples) < 2:  # once (a worker may ask again)
                self._clock_samples.append(gpu_clock.sample(self.device))
            if call == last and lease is not None:
                lease.downgrade()
            if call < cfg.warmup or call > last or call in kept:
                return None
            if every or (len(kept) < cfg.spot_checks and (rng.random() < cfg.spot_rate or (call == last and not kept))):
                kept[call] = (int(rng.integers(0, 1 << 63)), size)
                return kept[call]
            return None

        reply = self._request(TimeRequest(seeds=plan.seeds, factors=plan.factors, warmup=cfg.warmup,
                                          reload_seeds=plan.reloads, spot=True, launch_budget_ms=cfg.launch_budget_ms,
                                          records=False),
                              cfg.timing_timeout_s, "timing", on_spot=keep)
        self._calls += len(plan.seeds)
        self._kept = kept
        if asked != list(range(cfg.warmup, last + 1)):
            # every timed call is followed by its question, in order: a worker that skips them
            # (its harness's code replaced) would have no timed output checked
            self._finding("harness_tampered", f"the worker asked about {len(asked)} of {last + 1 - cfg.warmup} "
                                              "timed calls' outputs")
            self._fail(Stage.TIMING, "the timed calls' outputs were not offered for checking")
            raise _Stop
        return reply.body

    def _records(self, stage: Stage) -> Any:
        """The worker's device records (CUDA; None on the CPU), read outside the GPU gate: the
        worker stops its profiler through C functions bound before the candidate loaded, and
        converts and checks (host work; its last request ended with the device synchronised, and
        the checks read nothing the candidate can replace: ``StateGuard``, the seal). A failure is
        the ``stage``'s the records belong to (the timing's, after one)."""
        if not self.cuda:
            return None
        return self._request(EventsRequest(), self.config.call_timeout_s, "profiling", gated=False,
                             stage=stage).body.events

    def _timing(self, t: Any, ref: Any, events: Any) -> None:
        """The device records' findings about where the work ran (before the spot checks: a call
        that left work on another stream, or deferred it past its window, fails them, and says
        why), the spot checks of the kept outputs, then the candidate's and the reference's times."""
        plan, cfg = self.plan, self.config
        if self.cuda:
            try:
                self._windows = cut_windows(events, self._calls, plan.kernel_suffix)
                self._where_work_ran(self._windows, events)
            except ForgedRecords as exc:
                self._finding("harness_tampered", f"device records: {exc}")
                self._fail(Stage.TIMING, f"the device records of the calls are inconsistent: {exc}")
                raise _Stop from None
        with self.clock.part("transfers"):
            returned = {item.get("call") for item in t.spot if isinstance(item, dict)}
            if returned != set(self._kept) or len(t.spot) != len(self._kept):
                self._finding("timed_output_mismatch", "the kept timed outputs did not all come back")
                self._fail(Stage.TIMING, "the outputs of the checked timed calls did not all come back")
                raise _Stop
            reads = any(item.get("out") is not None for item in t.spot)
            if reads:
                # one model under the evaluation's init seed for every checked call, copied per call
                # on the device: the references' (built on the CPU outside the GPU gate if gone)
                with self.clock.part("spot_reference"):
                    self.prepared.prebuild(plan.init_seed)
            with self._shared():  # one section, each check one piece (a waiting timing runs between two)
                pristine = self.prepared.template(plan.init_seed) if reads else None
                for k, item in enumerate(t.spot):
                    if k:
                        self._step_aside()
                    self._spot_check(item, pristine)
                if self.cuda:
                    _release_if_short(self.device)
        if self.cuda:
            timed = self._windows[self._calls - cfg.timing_trials:]
            cand = [w.time_ns / 1e6 for w in timed]
        else:
            cand = list(t.host_ms[cfg.warmup:])
            if t.calls_without_launch:  # (on a GPU the device records decide, in _attribute)
                self._finding("launch_inconsistent", f"{t.calls_without_launch} timed calls launched no kernel of yours")
        if len(cand) != cfg.timing_trials or not cand:
            self._fail(Stage.TIMING, f"the timing returned {len(cand)} of {cfg.timing_trials} calls")
            raise _Stop
        r = self.result
        r.kernel_ms = statistics.median(cand)
        r.reference_ms = ref.median_ms
        r.speedup = r.reference_ms / r.kernel_ms if r.kernel_ms > 0 else None
        from drkernel.env.measure.timing import summarize

        r.details["timing"] = {
            "candidate_ms": summarize(cand), "reference": ref.describe(), "host_ms": summarize(list(t.host_ms[cfg.warmup:])),
            "launch_ms": summarize(list(t.launch_ms[cfg.warmup:])), "trials": cfg.timing_trials, "warmup": cfg.warmup,
            "reference_backend": cfg.reference_backend, "launch_budget": t.launch_budget,
            "samples": {"candidate": cand, "reference": ref.times_ms}, "checked_calls": sorted(self._kept),
            "persisting_l2_reset": t.persisting_l2_reset,
            "worker_phases_s": {k: float(t.phases_s[k]) for k in WORKER_PHASES if k in t.phases_s},
            **({"sm_clock": self._clock_samples} if any(self._clock_samples) else {}),
            "method": "device records between fences" if self.cuda else "host clock (CPU interpreter)",
        }
        if not self.cuda:
            self._cpu_foreign = list(t.foreign[cfg.warmup:])
        if r.speedup is not None and r.speedup > 10.0:
            r.details["excessive_speedup"] = True  # a review flag, not a verdict (pattern #25)
        self.completed.add(Stage.TIMING)

    def _spot_check(self, item: dict[str, Any], pristine: torch.nn.Module | None) -> None:
        """One kept timed output against the reference on the same inputs and parameters."""
        plan = self.plan
        call = item["call"]
        key, reload = plan.timed_key(call)
        ok, msg = False, "timed call returned no readable tensor"
        if item.get("out") is not None:
            try:
                with self.clock.part("spot_reference"):
                    spot = self.prepared.reference(plan.init_seed, key, reload, self._buffers, cache=False,
                                                   pristine=pristine)
                with self.clock.part("spot_read"):
                    got = read_tensor(item["out"], self.proc.workdir, spot.out.device, self._stage())
                with self.clock.part("spot_compare"):
                    cmp = self._compare_spot(got, item.get("shape"), spot, self._kept[call])
                ok, msg = cmp.ok, cmp.message
            except (TensorIOError, OSError) as exc:
                msg = str(exc)
        if not ok:
            self._finding("timed_output_mismatch", f"timed call {call}: {msg[:120]}")
            self._fail(Stage.TIMING, f"output of timed call {call} is wrong: {msg}")
            raise _Stop

    def _attribute(self, events: Any) -> None:
        """Coverage, own launches, host transfers and side streams of every call (see
        :mod:`drkernel.env.measure.attribution`); work outside own kernels below ``min_coverage`` is a verdict."""
        r, cfg = self.result, self.config
        if self.cuda:
            windows = self._windows  # (with a timing, its records' findings were made then: _timing)
            if windows is None:
                try:
                    windows = cut_windows(events, self._calls, self.plan.kernel_suffix)
                    self._where_work_ran(windows, events)
                except ForgedRecords as exc:
                    self._finding("harness_tampered", f"device records: {exc}")
                    self._fail(Stage.PROFILING, f"the device records of the calls are inconsistent: {exc}")
                    return
            own = [w.own_launches for w in windows]
            if windows and all(c == 0 for c in own):
                self._finding("no_triton_launch", "no call ran one of your kernels on the device")
            elif any(c == 0 for c in own):
                self._finding("launch_inconsistent", f"calls without an own kernel: {own.count(0)} of {len(own)}")
            host = [w for w in windows if w.dtoh_ns > max(20_000, 0.05 * w.time_ns)]
            if host:
                self._finding("host_compute", f"device-to-host copies in {len(host)} of {len(windows)} calls "
                                              f"(up to {max(w.dtoh_ns for w in host) / 1e3:.0f} us)")
            coverage = coverage_of(windows)
            top = top_kernels(windows, self.plan.kernel_suffix)
            r.details["profile"] = {"method": "cuda_profiler", "top": top, "calls": len(windows),
                                    "own_us": sum(w.own_ns for w in windows) / max(len(windows), 1) / 1e3,
                                    "total_us": sum(w.device_ns for w in windows) / max(len(windows), 1) / 1e3}
            coverage = self._bounded_by_reference(coverage, windows)
            others = ", ".join(f"{t['name'][:60]} ({t['us']:.1f} us)" for t in top if not t["own"])[:400]
        else:
            # Every call must meet the bar, the worst one decides: a call that does its work in torch
            # is not made good by others that did not (a candidate that counts its calls can tell
            # the correctness trials from the timed ones; the cost of a call is exact, not noisy).
            costs = [x.foreign for x in self._run_replies] + list(getattr(self, "_cpu_foreign", []))
            per_call = max(costs) if costs else 0.0
            ref_cost = self._ref_cost
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
            self._fail(Stage.PROFILING, f"only {100 * r.coverage:.0f}% of the forward's work is in your own Triton "
                       f"kernels (at least {100 * cfg.min_coverage:.0f}% is required)"
                       + (f"; the work outside them takes {100 * outside:.0f}% of the reference's whole time"
                          if outside is not None and 1.0 - outside <= r.coverage + 1e-9 else "")
                       + (f"; the rest: {others}" if others else ""))

    def _bounded_by_reference(self, coverage: float | None, windows: list[CallWindow]) -> float | None:
        """Coverage that idle time cannot buy: at most ``1 - outside / reference``, the device time
        a timed call spends outside the candidate's own kernels (median over the timed calls)
        against the reference's whole time. The share of the candidate's own time alone grows with
        anything its kernels do, a spin on the GPU's clock or a sleep included, while cuBLAS does the
        work; the reference's time is not the candidate's to inflate. For a kernel faster than the
        reference the bound is above its share and changes nothing."""
        ref_ms, n = self.result.reference_ms, self.config.timing_trials
        if coverage is None or not ref_ms or self.result.kernel_ms is None or len(windows) < n:
            return coverage
        outside_ms = statistics.median((w.device_ns - w.own_ns) / 1e6 for w in windows[-n:])
        bound = 1.0 - min(1.0, max(outside_ms, 0.0) / ref_ms)
        self.result.details["profile"].update({"outside_ms": outside_ms, "outside_vs_reference": outside_ms / ref_ms,
                                               "own_share": coverage})
        return min(coverage, bound)

    def _where_work_ran(self, windows: list[CallWindow], events: Any) -> None:
        """Findings of the device records: work on other streams than the calls' (``side_stream``),
        own kernels between the calls (``work_outside_call``). Raises ForgedRecords."""
        side = [w for w in windows if w.other_stream_ns > 0]
        if side:
            self._finding("side_stream", f"work on other streams in {len(side)} of {len(windows)} calls")
        n_out, ns_out = own_outside_windows(events, self._calls, self.plan.kernel_suffix)
        if n_out:
            self._finding("work_outside_call", f"{n_out} launches of your kernels ({ns_out / 1e3:.0f} us) ran "
                                               "between calls, outside every call's window")

    # -- pieces ------------------------------------------------------------------------------------
    def _checked_call(self, req: RunRequest, ref: ReferenceOutput, label: str) -> tuple[bool, torch.Tensor | None, str | None]:
        """One correctness call. Returns (ok, candidate output or None, error message or None).

        The call, the read of its output (a GPU read is GPU work: not during a timing) and the
        comparison hold the GPU's shared side once: each entry waits behind every timing queued
        meanwhile (writer preference), so three entries per call made an evaluation wait three
        times as often."""
        with self._shared():
            return self._checked_call_once(req, ref, label)

    def _checked_call_once(self, req: RunRequest, ref: ReferenceOutput, label: str) -> tuple[bool, torch.Tensor | None, str | None]:
        req = RunRequest(**{**req.__dict__, "prefill_bytes": ref.nbytes})
        desc = f"{label} ({req.distribution} inputs, {req.grad_mode}, shapes {ref.shapes})"
        reply = self._request(req, self.config.call_timeout_s, "correctness", desc=desc)
        self._calls += 1
        r = reply.body
        self._run_replies.append(r)
        if r.interpreter:  # what the CPU interpreter decided that a GPU decides otherwise (autotune's config)
            said = self.result.details.setdefault("interpreter", [])
            said.extend(x for x in r.interpreter[:8] if x not in said and len(said) < 8)
        self._worker_parts("run", r.phases_s)
        if len(self._run_replies) == 1:
            self._worker_parts("first_run", r.phases_s)
        self.clock.add("transfers", r.write_s)  # measured in the worker, inside the correctness request
        self.clock.add("correctness", -r.write_s)
        if r.lazy:
            self._finding("lazy_output", r.lazy)
            return self._trial_failed(f"{desc}: {r.lazy}")
        if r.not_tensor:
            return self._trial_failed(f"{desc}: {r.not_tensor}")
        if r.mutated:
            self._finding("input_mutated", f"inputs {r.mutated} changed during {label}")
        if r.aliases_input and not ref.aliases_input:
            self._finding("output_aliases_input", f"{label}")
        if r.dense is False and ref.dense:
            self._finding("lazy_output", f"{label}: the output is not dense (e.g. an expanded constant)")
        if r.strides is not None and ref.contiguous and ref.out.numel() > 1 \
                and not _contiguous_strides(list(ref.out.shape), r.strides):
            # The values are compared in row-major order; the layout is part of the result too (a
            # transposed view of a straight copy is not the transpose the task materialises).
            return self._trial_failed(f"{desc}: the output is laid out with strides {tuple(r.strides)}, the "
                                      f"reference's is contiguous {tuple(ref.out.stride())}: return it in that "
                                      "layout (.contiguous() in your kernel's output, not a view)")
        try:
            with self.clock.part("transfers"):
                out = read_tensor(r.out, self.proc.workdir, ref.out.device, self._stage())
                if isinstance(r.out, dict) and isinstance(r.out.get("file"), str):
                    (self.proc.workdir / r.out["file"]).unlink(missing_ok=True)
        except (TensorIOError, OSError, TypeError, KeyError) as exc:
            return self._trial_failed(f"{desc}: unreadable output ({exc})")
        with self.clock.part("compare"):
            cmp = self._compare(out, ref)
        if not cmp.ok:
            self.result.details.setdefault("first_failure", {"trial": desc, **cmp.to_dict()})
            return self._trial_failed(f"{desc}: {cmp.message}", out)
        if r.mutated:
            return self._trial_failed(f"{desc}: the candidate modified its input(s) {r.mutated}", out)
        return True, out, None

    def _worker_parts(self, key: str, phases: dict[str, float]) -> None:
        """The worker's own timers (diagnostics only: the candidate's process could forge them)."""
        into = self.result.details.setdefault("worker_parts_s", {}).setdefault(key, {})
        for name, sec in list(phases.items())[:16]:
            into[name[:32]] = into.get(name[:32], 0.0) + float(sec)

    def _stage(self) -> Any:
        return getattr(self.proc, "stage", None)

    def _trial_failed(self, message: str, out: torch.Tensor | None = None) -> tuple[bool, torch.Tensor | None, str]:
        self._fail(Stage.CORRECTNESS, message)
        return False, out, message

    def _compare_spot(self, got: torch.Tensor, shape: Any, spot: ReferenceOutput, plan: tuple[int, int]) -> Comparison:
        """A checked timed output: whole, or the elements at the plan's indices (drkernel.env.measure.spot)
        against the same elements of the reference, within the whole output's tolerance."""
        ref = spot.out
        if plan[1] <= 0 or ref.numel() <= 0:  # sent back whole (sample_index gives no indices)
            return self._compare(got, spot)
        if shape != list(ref.shape):
            return Comparison(False, f"shape mismatch: got {str(shape)[:80]}, expected {tuple(ref.shape)}")
        return self._compare(got, spot, sample=plan)

    def _compare(self, out: torch.Tensor, ref: ReferenceOutput | torch.Tensor,
                 sample: tuple[int, int] | None = None) -> Comparison:
        """Compare on the reference's device; a device out of memory (the candidate may hold most of
        it) falls back to the CPU. ``ref``: a reference output, judged by the evaluation's precision
        policy (:meth:`_judge`), or a plain tensor (the determinism re-run against the first
        output: the scale-aware tolerance). ``sample``: ``(seed, size)`` of a checked timed output
        sent back as a sample (drkernel.env.measure.spot): its elements of the reference, the oracle and the
        sensitivity, within the whole output's scale. Any other failure here is the grader's
        (EnvironmentFailure)."""
        try:
            try:
                return self._judge(out, ref, sample, cpu=False)
            except torch.OutOfMemoryError:
                torch.cuda.empty_cache()
                return self._judge(out.cpu(), ref, sample, cpu=True)
        except Exception as exc:  # noqa: BLE001
            raise EnvironmentFailure(f"comparing outputs failed in the grader: {type(exc).__name__}: {exc}") from exc

    def _judge(self, out: torch.Tensor, ref: ReferenceOutput | torch.Tensor, sample: tuple[int, int] | None,
               cpu: bool) -> Comparison:
        """One comparison (:meth:`_compare`): integer outputs exactly; float outputs by the policy:
        ``oracle`` (:func:`drkernel.env.judge.precision.judge`, with the oracle's sensitivity added where
        the element test alone failed), ``allclose`` or ``rms`` (the scale-aware tolerance, with the
        conditioning allowance), which also stands in where the reference has no float64 oracle."""
        spot = ref if isinstance(ref, ReferenceOutput) else None
        whole = spot.out if spot is not None else ref
        index, scale = None, None
        if cpu:
            whole = whole.cpu()
        if sample is not None:
            index = sample_index(whole.numel(), sample[0], sample[1], torch, whole.device)
            scale = reference_rms(whole)

        def pick(t: torch.Tensor | None) -> torch.Tensor | None:
            """``t`` on the comparing device, at the sample's indices when sampled."""
            if t is None:
                return None
            t = t.to(whole.device)
            return t if index is None else t.reshape(-1).index_select(0, index)

        r = pick(whole)
        if spot is None or not (r.is_floating_point() or r.is_complex()):
            return compare_outputs(out, r, self.atol, self.rtol, scale=scale)
        pol = self.policy
        if pol.rule == "allclose":
            return compare_outputs(out, r, pol.atol, pol.rtol, scale=1.0)
        record = self.result.details["precision"]
        record.setdefault("oracle", spot.oracle_note)
        if pol.rule == "oracle" and spot.oracle is not None:
            oracle = pick(spot.oracle)
            loose = pick(spot.rounded(pol.operands)) if pol.operands and spot.rounded else None
            cmp = judge(out, r, oracle, loose=loose)
            if not cmp.ok and near_miss(cmp) and spot.sensitivity is not None and not cpu:
                sigma = self._sensitivity(spot)
                if sigma is not None:
                    second = judge(out, r, oracle, loose=loose, sigma=pick(sigma))
                    if second.ok:
                        self._conditioned(cmp, r.numel())
                    cmp = second if second.ok else cmp
            self._measured(cmp)
            return cmp
        if pol.rule == "oracle":
            record["fallback"] = record.get("fallback", 0) + 1  # no oracle: the scale-aware tolerance
        cmp = compare_outputs(out, r, self.atol, self.rtol, scale=scale)
        if cmp.ok or spot.sensitivity is None or cmp.max_abs_err is None or cmp.max_abs_err == float("inf"):
            return cmp
        sigma = self._sensitivity(spot) if not cpu else None
        if sigma is None:
            return cmp
        second = compare_outputs(out, r, self.atol, self.rtol, allowance=CONDITION_ULPS * pick(sigma), scale=scale)
        if second.ok:
            self._conditioned(cmp, r.numel())
        return second if second.ok else cmp

    def _sensitivity(self, spot: ReferenceOutput) -> torch.Tensor | None:
        """The oracle's sensitivity for a failed comparison's second look, or None where the
        device has no memory for its forwards (the first verdict stands; a sensitivity would only
        have loosened it)."""
        try:
            return spot.sensitivity(spot.out)
        except torch.OutOfMemoryError:
            if self.cuda:
                _release_if_short(self.device)
            return None

    def _conditioned(self, first: Comparison, n: int) -> None:
        """A comparison that passed only with the sensitivity allowance (``details["ill_conditioned"]``)."""
        conditioned = self.result.details.setdefault("ill_conditioned", {"checks": 0, "elements": 0})
        conditioned["checks"] += 1
        conditioned["elements"] = max(conditioned["elements"], round((first.mismatch_frac or 0.0) * n))

    def _measured(self, cmp: Comparison) -> None:
        """The oracle's measurements of the comparison furthest from the float64 value, by error
        relative to the reference's own (``details["precision"]["worst"]``)."""
        p = cmp.precision or {}
        ratio = p.get("rms_err", 0.0) / max(p.get("reference_rms_err", 0.0), 1e-300)
        record = self.result.details["precision"]
        record["checks"] = record.get("checks", 0) + 1
        if ratio >= record.get("worst_ratio", -1.0):
            record["worst_ratio"], record["worst"] = ratio, p

    def _finding(self, hack_id: str, detail: str) -> None:
        """An integrity finding: the candidate is marked hacked, the detail kept for feedback."""
        self.result.add_hack(hack_id)
        found = self.result.details.setdefault("integrity", [])
        if len(found) < 32 and {"id": hack_id, "detail": detail[:300]} not in found:
            found.append({"id": hack_id, "detail": detail[:300]})

    def _request(self, req: Any, stage_timeout_s: float, part: str, desc: str | None = None,
                 on_spot: Callable[[int], bool] | None = None, gated: bool = True,
                 stage: Stage | None = None) -> Reply:
        """One request to the candidate's process, in the GPU gate's shared side (``gated`` False:
        outside the gate, for a request that runs no kernel and no code of the candidate's). A
        failure is at ``stage`` (default: the one the worker names)."""
        self._check_cancel()
        with (self._shared() if gated else contextlib.nullcontext()), self.clock.part(part):
            reply = self.proc.request(req, self._remaining(stage_timeout_s), on_spot=on_spot)
        for hack_id, detail in reply.findings:
            self._finding(hack_id, detail)
        if not reply.ok:
            f = reply.body
            if f.fault == "harness":
                raise EnvironmentFailure(f"the evaluation worker failed: {f.error}")
            stage = stage or _stage_of(f.stage, self.stage)
            self._fail(stage, f"{desc}: {f.error}" if desc else f.error)
            if stage == Stage.CORRECTNESS and self.result.details.get("trials") is not None and desc:
                self.result.details["trials"].append({"ok": False, "error": f.error[:500]})
            raise _Stop
        return reply

    def _remaining(self, stage_timeout_s: float) -> float:
        remaining = self._deadline - time.monotonic()
        if remaining <= 0:
            raise CandidateFailure("timeout", f"total deadline of {self.config.total_timeout_s:.0f}s exceeded "
                                   f"before {self.stage.value}")
        return min(stage_timeout_s, remaining)

    def _check_cancel(self) -> None:
        if self.cancel.cancelled:
            raise EvaluationCancelled(f"evaluation of {self.prepared.task.name} was cancelled")

    @contextlib.contextmanager
    def _exclusive(self) -> Iterator[Lease | None]:
        with self._gate("exclusive") as lease:
            if self.cuda:  # the grader's own GPU work still queued from shared sections ends first
                torch.cuda.synchronize(self.device)
                self._clock_samples.append(gpu_clock.sample(self.device))
            yield lease

    @contextlib.contextmanager
    def _shared(self) -> Iterator[None]:
        with self._gate("shared"):
            yield

    @contextlib.contextmanager
    def _gate(self, side: str) -> Iterator[Any]:
        """Enter the GPU gate; the wait is queueing for the GPU, not the candidate's time."""
        if self.gate is None:
            yield None
            return
        t0 = time.monotonic()
        with getattr(self.gate, side)(self._check_cancel) as held:
            t1 = time.monotonic()
            self._deadline += t1 - t0
            self.clock.queued(t1 - t0)
            self._gate_depth += 1
            aside = self._aside_s
            try:
                yield held
            finally:
                self._gate_depth -= 1
                if not self._gate_depth:  # (time stepped aside for a timing is not held)
                    self._gate_holds.append((side, time.monotonic() - t1 - (self._aside_s - aside)))

    def _step_aside(self) -> None:
        """Between two pieces of long shared work: let a waiting timing run first
        (:meth:`DeviceGate.step_aside`); the wait is queueing, not the candidate's time."""
        if self.gate is None or self._gate_depth != 1:
            return
        t0 = time.monotonic()
        if self.gate.step_aside(self._check_cancel):
            waited = time.monotonic() - t0
            self._deadline += waited
            self.clock.queued(waited)
            self._aside_s += waited

    def _worth_timing(self) -> bool:
        r = self.result
        return (r.error is None and bool(self.trials_ok) and self.config.measure_performance
                and (not r.hacked or self.config.time_hacked))

    def _enter(self, stage: Stage) -> None:
        self.stage = stage
        self.entered.append(stage)

    def _fail(self, stage: Stage, message: str) -> None:
        if self.result.error is None:
            self.result.error = EvalError(stage.value, _clip(message))

    def _close(self) -> None:
        plan = getattr(self, "plan", None)
        if plan is not None:  # its models (the outputs stay cached for evaluations under the same seed)
            self.prepared.forget(plan.init_seed)
        proc, self.proc = self.proc, None  # (closing it kills its compiler, if any still runs)
        if proc is not None:
            self.result.details["output_bytes"] = proc.output_bytes
            if proc.output_bytes:
                self.result.details["output_tail"] = proc.output_tail(2000)
            self._other_threads(proc)
            with self.clock.part("close"):
                self._release_fn(proc)

    OTHER_THREADS_MS = 0.5
    """CPU milliseconds other threads may spend in a CPU evaluation (honest kernels spend 0: the
    worker's only thread of work is the main one)."""

    OTHER_THREADS_CUDA_MS = 100.0
    OTHER_THREADS_CUDA_SHARE = 0.1
    """On a GPU the CUDA driver's and the profiler's own threads run in the candidate's process: the
    56 bundled solutions spent 2-16 ms there against 0.9-3 s on the main thread (H100, 2026-11-26).
    Above ``max(100 ms, 10% of the main thread's)`` it is work of the candidate's own."""

    TICK_SLACK_NS = 50e6
    """Exited threads are seen only through the process's CPU ticks (10 ms each), whose split between
    process and thread is rounded separately: a difference below this is not counted."""

    def _other_threads(self, proc: Any) -> None:
        """CPU time the candidate's process spent on threads other than the one that runs its calls,
        from its load to now, read from ``/proc`` by the grader (the candidate cannot hide or forge
        it). The harness runs everything on the main thread (torch with one intra-op thread, BLAS
        with one), so this is work beside or after the calls: a native pool's thread (a TorchScript
        ``fork``, a C extension's), computing off the clock or burning CPU while others are timed."""
        start = getattr(self, "_cpu_start", None)
        if start is None or start[0] is None or not proc.alive:
            return
        end, threads = proc.cpu_seconds(), proc.thread_run_ns()
        if end is None:
            return
        main_tid, before = proc.pid, start[1]
        # live threads to the nanosecond (schedstat); exited ones only through the process's ticks
        live_ns = sum(ns - before.get(tid, 0) for tid, ns in threads.items() if tid != main_tid)
        # the kernel scales each task's ticks on its own: process and thread differ by a tick or two
        ticks_ns = ((end[0] - start[0][0]) - (end[1] - start[0][1])) * 1e9
        other_ms = max(live_ns, ticks_ns if ticks_ns > self.TICK_SLACK_NS else 0.0, 0.0) / 1e6
        main_ms = (threads.get(main_tid, 0) - before.get(main_tid, 0)) / 1e6
        self.result.details["cpu_ms"] = {"main_thread": round(main_ms, 3), "other_threads": round(other_ms, 3),
                                         "threads": len(threads), "live_other_ms": round(live_ns / 1e6, 3)}
        limit = max(self.OTHER_THREADS_CUDA_MS, self.OTHER_THREADS_CUDA_SHARE * main_ms) if self.cuda \
            else self.OTHER_THREADS_MS
        if other_ms > limit:
            self._finding("other_threads", f"{other_ms:.1f} ms of CPU on {max(len(threads) - 1, 1)} other "
                                           "thread(s) of your process")

    # -- the verdict: decided here and nowhere else --------------------------------------------------
    def _verdict(self) -> EvalResult:
        """compiled: the COMPILE stage completed. correct: every correctness trial matched, and every
        stage the candidate entered completed without error (a kernel that raises while timed, or
        does most of its work outside its own kernels, is not correct). passed = compiled and
        correct and not hacked (EvalResult.passed)."""
        r = self.result
        r.compiled = Stage.COMPILE in self.completed
        r.correct = (r.compiled and bool(self.trials_ok) and r.error is None
                     and all(s in self.completed for s in self.entered))
        r.hacked = bool(r.hack_reasons)
        if r.error is not None and r.error.stage != Stage.PROFILING.value:  # no numbers for a failed candidate
            r.speedup = r.coverage = r.kernel_ms = r.reference_ms = None
        r.details["stages"] = [s.value for s in self.entered]
        r.details["stage_seconds"] = self.clock.seconds
        if self._gate_holds:
            shared = [t for side, t in self._gate_holds if side == "shared"]
            r.details["gpu_gate"] = {"shared_entries": len(shared), "shared_s": round(sum(shared), 4),
                                     "shared_max_s": round(max(shared, default=0.0), 4),
                                     "exclusive_s": round(sum(t for side, t in self._gate_holds if side != "shared"), 4)}
        r.details["eval_seconds"] = round(time.monotonic() - self._t0, 3)
        r.feedback = build_feedback(r)
        return r


def _stage_of(name: str, default: Stage) -> Stage:
    try:
        return Stage(name)
    except ValueError:
        return default


# -- the one-call API ---------------------------------------------------------------------------------
def as_task(task: Task | os.PathLike | str, entry_point: str = "Model") -> Task:
    """A Task from a Task, a path (``pathlib.Path``) or task *source text* (a str is never a path)."""
    if isinstance(task, Task):
        return task
    if isinstance(task, os.PathLike):
        return Task.from_file(task, entry_point=entry_point)
    if isinstance(task, str):
        return Task.from_source(task, entry_point=entry_point)
    raise TypeError(f"task must be a Task, a pathlib.Path or source text, got {type(task).__name__}")


def as_source(candidate: str | os.PathLike) -> str:
    """Candidate source: a str *is* the source (model output is only ever source, issue 8 defect 2);
    only an explicit ``pathlib.Path`` is read from disk."""
    if isinstance(candidate, os.PathLike):
        return Path(candidate).read_text(encoding="utf-8", errors="replace")
    if isinstance(candidate, str):
        return candidate
    raise TypeError(f"candidate must be source text (str) or a pathlib.Path, got {type(candidate).__name__}")


def evaluate(task: Task | os.PathLike | str, source: str | os.PathLike, *, seed: int | None = None,
             config: EvalConfig | None = None, cancel: CancelToken | None = None) -> EvalResult:
    """Grade one candidate in a fresh process, in the calling thread.

    ``task``: a :class:`Task`, a ``pathlib.Path`` or task source text. ``source``: the candidate's
    source text; a ``pathlib.Path`` is read (a str is never treated as a file name). ``seed`` fixes
    every hidden seed (None: drawn from the OS). Raises TaskError for an unusable task and
    EnvironmentFailure when the grader cannot run; everything the candidate does wrong is in the
    returned :class:`EvalResult`. For many evaluations use :class:`~drkernel.env.grader.LocalGrader`
    (warm processes, cached references, per-GPU scheduling).
    """
    config = (config or EvalConfig()).validate()
    task = as_task(task, config.entry_point)
    src = as_source(source)
    device = resolve_device(config.device)
    prepared = PreparedTask.prepare(task, config.resolved_task_size(), device)
    try:
        return Evaluation(prepared, src, seed=seed, config=config, cancel=cancel).run()
    finally:
        prepared.release()  # its references and models leave the device now, not at the next collection


def _contiguous_strides(shape: list[int], strides: list[int]) -> bool:
    """Whether ``strides`` are row-major for ``shape`` (dimensions of size 1 may have any stride)."""
    if len(shape) != len(strides):
        return False
    expected = 1
    for size, stride in zip(reversed(shape), reversed(strides)):
        if size != 1 and stride != expected:
            return False
        expected *= size
    return True


__all__ = ["evaluate", "Evaluation", "EvaluationCancelled", "CancelToken", "Plan", "DeviceGate", "Lease", "device_gate", "fresh_process",
           "as_task", "as_source", "resolve_device"]
