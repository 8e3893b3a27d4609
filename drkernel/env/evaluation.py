"""Grading one candidate: :class:`Evaluation`, and ``evaluate(task, source, *, seed, config)``.

An evaluation is a short pipeline of named stages (:meth:`Evaluation._flow`), each in the room of
its concern::

    static checks ............ guards.stages.static         correctness, determinism .. judge.stages
    reference outputs ........ tasks.stages.references     reference time, timed calls,
    process, load, compiler .. process.stages                spot checks, attribution .. measure.stages
    verdict, feedback ........ judge.stages.verdict        close ..................... process.stages.close

The stages share the evaluation's state and a few of its methods (``request`` to the candidate's
process, ``finding``, ``fail``, the GPU gate's ``shared``/``exclusive`` sides); a stage that decides
the verdict raises :class:`~drkernel.env.result.Stop`. Across the two processes::

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
        a clean worker (drkernel.env.tasks.reference_timing)
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
import os
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator

import torch

from drkernel.env.config import EvalConfig
from drkernel.env.device import evaluation_stream, fp32_exact, resolve_device
from drkernel.env.guards import stages as guards
from drkernel.env.judge import stages as judge
from drkernel.env.judge.precision import policy as precision_policy
from drkernel.env.measure import gpu_clock
from drkernel.env.measure import stages as measure
from drkernel.env.measure.attribution import CallWindow
from drkernel.env.measure.gate import DeviceGate, Lease, device_gate
from drkernel.env.process import stages as process
from drkernel.env.process.sandbox import CandidateFailure, CandidateProcess, ProcessSource, close_process, fresh_process
from drkernel.env.protocol import Reply
from drkernel.env.result import EnvironmentFailure, EvalError, EvalResult, Stage, Stop
from drkernel.env.tasks import reference_timing
from drkernel.env.tasks import stages as tasks
from drkernel.env.tasks.prepared import PreparedTask, TrialKey
from drkernel.env.tasks.task import SCALE_ENDS, Task, TaskError, trial_seeds

GRAD_MODES = ("no_grad", "enable_grad", "inference_mode")


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


def _clip(text: str, limit: int = 2000) -> str:
    """Keep the head (what failed) and the tail (the exception), drop the middle."""
    text = text.strip()
    if len(text) <= limit:
        return text
    head = limit // 3
    return text[:head] + " ... " + text[-(limit - head - 5):]


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
        self.acquire_fn = acquire
        self.release_fn = release or close_process
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
        self.t0 = time.monotonic()
        self.deadline = self.t0 + config.total_timeout_s
        self.first_out: torch.Tensor | None = None
        self.run_replies: list[Any] = []
        self.calls = 0  # calls the candidate's worker made (each bracketed by fences on a GPU)
        self.buffers = True
        self.windows: list[CallWindow] | None = None
        self.ref_cost = 0.0
        self.clock_samples: list[dict[str, Any] | None] = []  # SM clock when the timing opened and ended
        self.budget_verdict: dict[str, Any] | None = None  # the hold's probe on this device (process.hold_verdict)
        self.gate_holds: list[tuple[str, float]] = []  # (side, seconds held), outermost entries only
        self._gate_depth = 0
        self._aside_s = 0.0  # seconds stepped aside for waiting timings (DeviceGate.step_aside)

    # -- the pipeline ----------------------------------------------------------------------------------
    def run(self) -> EvalResult:
        try:
            # The grader's own GPU work (references, reads, comparisons) on a stream of this
            # evaluation's: on the one default stream every read waited for every other thread's work.
            with fp32_exact(), (evaluation_stream(self.device) if self.cuda else contextlib.nullcontext()):
                self._flow()
        except Stop:
            pass
        except CandidateFailure as exc:
            if exc.kind == "cancelled" or self.cancel.cancelled:
                raise EvaluationCancelled(f"evaluation of {self.prepared.task.name} was cancelled") from None
            tail = f"\n{exc.output_tail.strip()[-1500:]}" if exc.output_tail.strip() else ""
            if exc.kind == "forged":
                self.finding("harness_tampered", f"the worker's channel: {exc.message}")
            self.fail(self.stage, f"{exc.message}{tail}")
            # What ended the candidate's process (timeout, crash, memory, flood, protocol): callers
            # that store verdicts use it (a timeout under load is not a property of the kernel).
            self.result.details["failure_kind"] = exc.kind
        finally:
            process.close(self)
        if self.cancel.cancelled:
            raise EvaluationCancelled(f"evaluation of {self.prepared.task.name} was cancelled")
        return judge.verdict(self)

    def _flow(self) -> None:
        """The stages, in order; each one's room is the module it is called from."""
        guards.static(self)
        self.plan = Plan.make(self.prepared, self.config, self.seed)
        self.prepared.use(self.plan.init_seed)  # its models stay while it runs (forget at the close)
        process.acquire(self)  # a warm worker: no candidate code has run in it
        # the compiler (CPU only, no GPU ever) works beside the references and the load
        process.start_compiler(self, process.write_candidate(self))
        tasks.references(self)
        self.enter(Stage.COMPILE)
        process.load(self)
        process.precompile(self)
        self.enter(Stage.CORRECTNESS)
        try:
            judge.correctness(self)
            judge.determinism(self)
        finally:
            measure.launch_flags_cpu(self)  # launch rules also over the calls of a failed run (hack flags)
        self.completed.add(Stage.CORRECTNESS)
        self.enter(Stage.LAUNCHES)
        self.completed.add(Stage.LAUNCHES)
        if self._worth_timing():
            ref_proc = measure.reference_process(self)
            with self.exclusive() as lease:
                self.enter(Stage.TIMING)
                ref = measure.time_reference(self, ref_proc)
                reply = measure.timed_calls(self, lease)
            events = measure.records(self, Stage.TIMING)  # (outside the gate: the next timing need not wait for it)
            measure.timing(self, reply, ref, events)
        elif not (self.config.profile and self.result.error is None and bool(self.trials_ok)
                  and (not self.result.hacked or self.config.time_hacked)):
            return
        elif self.cuda:  # no timing: the device records of the correctness calls
            events = measure.records(self, Stage.PROFILING)
        else:
            events = None  # CPU: the correctness calls' torch work came with their replies
        if not self.config.profile:
            return
        self.enter(Stage.PROFILING)
        measure.attribute(self, events)
        self.completed.add(Stage.PROFILING)

    # -- what every stage uses ------------------------------------------------------------------------
    def request(self, req: Any, stage_timeout_s: float, part: str, desc: str | None = None,
                on_spot: Callable[[int], bool] | None = None, gated: bool = True,
                stage: Stage | None = None) -> Reply:
        """One request to the candidate's process, in the GPU gate's shared side (``gated`` False:
        outside the gate, for a request that runs no kernel and no code of the candidate's). A
        failure is at ``stage`` (default: the one the worker names)."""
        self.check_cancel()
        with (self.shared() if gated else contextlib.nullcontext()), self.clock.part(part):
            reply = self.proc.request(req, self.remaining(stage_timeout_s), on_spot=on_spot)
        for hack_id, detail in reply.findings:
            self.finding(hack_id, detail)
        if not reply.ok:
            f = reply.body
            if f.fault == "harness":
                raise EnvironmentFailure(f"the evaluation worker failed: {f.error}")
            stage = stage or _stage_of(f.stage, self.stage)
            self.fail(stage, f"{desc}: {f.error}" if desc else f.error)
            if stage == Stage.CORRECTNESS and self.result.details.get("trials") is not None and desc:
                self.result.details["trials"].append({"ok": False, "error": f.error[:500]})
            raise Stop
        return reply

    def finding(self, hack_id: str, detail: str) -> None:
        """An integrity finding: the candidate is marked hacked, the detail kept for feedback."""
        self.result.add_hack(hack_id)
        found = self.result.details.setdefault("integrity", [])
        if len(found) < 32 and {"id": hack_id, "detail": detail[:300]} not in found:
            found.append({"id": hack_id, "detail": detail[:300]})

    def fail(self, stage: Stage, message: str) -> None:
        if self.result.error is None:
            self.result.error = EvalError(stage.value, _clip(message))

    def enter(self, stage: Stage) -> None:
        self.stage = stage
        self.entered.append(stage)

    @contextlib.contextmanager
    def shared(self) -> Iterator[None]:
        with self.in_gate("shared"):
            yield

    @contextlib.contextmanager
    def exclusive(self) -> Iterator[Lease | None]:
        with self.in_gate("exclusive") as lease:
            if self.cuda:  # the grader's own GPU work still queued from shared sections ends first
                torch.cuda.synchronize(self.device)
                self.clock_samples.append(gpu_clock.sample(self.device))
            yield lease

    @contextlib.contextmanager
    def in_gate(self, side: str) -> Iterator[Any]:
        """Enter the GPU gate; the wait is queueing for the GPU, not the candidate's time."""
        if self.gate is None:
            yield None
            return
        t0 = time.monotonic()
        with getattr(self.gate, side)(self.check_cancel) as held:
            t1 = time.monotonic()
            self.deadline += t1 - t0
            self.clock.queued(t1 - t0)
            self._gate_depth += 1
            aside = self._aside_s
            try:
                yield held
            finally:
                self._gate_depth -= 1
                if not self._gate_depth:  # (time stepped aside for a timing is not held)
                    self.gate_holds.append((side, time.monotonic() - t1 - (self._aside_s - aside)))

    def step_aside(self) -> None:
        """Between two pieces of long shared work: let a waiting timing run first
        (:meth:`DeviceGate.step_aside`); the wait is queueing, not the candidate's time."""
        if self.gate is None or self._gate_depth != 1:
            return
        t0 = time.monotonic()
        if self.gate.step_aside(self.check_cancel):
            waited = time.monotonic() - t0
            self.deadline += waited
            self.clock.queued(waited)
            self._aside_s += waited

    def remaining(self, stage_timeout_s: float) -> float:
        remaining = self.deadline - time.monotonic()
        if remaining <= 0:
            raise CandidateFailure("timeout", f"total deadline of {self.config.total_timeout_s:.0f}s exceeded "
                                   f"before {self.stage.value}")
        return min(stage_timeout_s, remaining)

    def check_cancel(self) -> None:
        if self.cancel.cancelled:
            raise EvaluationCancelled(f"evaluation of {self.prepared.task.name} was cancelled")

    def worker_parts(self, key: str, phases: dict[str, float]) -> None:
        """The worker's own timers (diagnostics only: the candidate's process could forge them)."""
        into = self.result.details.setdefault("worker_parts_s", {}).setdefault(key, {})
        for name, sec in list(phases.items())[:16]:
            into[name[:32]] = into.get(name[:32], 0.0) + float(sec)

    def output_stage(self) -> Any:
        return getattr(self.proc, "stage", None)

    def _worth_timing(self) -> bool:
        r = self.result
        return (r.error is None and bool(self.trials_ok) and self.config.measure_performance
                and (not r.hacked or self.config.time_hacked))


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
    """Candidate source: a str *is* the source (model output is only ever source);
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


__all__ = ["evaluate", "Evaluation", "EvaluationCancelled", "CancelToken", "Plan", "StageClock", "DeviceGate", "Lease",
           "device_gate", "fresh_process", "as_task", "as_source", "resolve_device"]
