"""The evaluation's process stages: the candidate's process acquired, loaded, compiled for, closed.

In pipeline order: ``acquire(ev)`` takes a warm worker (no candidate code has run in it),
``write_candidate`` puts the source in its directory, ``start_compiler`` forks the compiler beside
the references (GPU), ``load`` loads the task and the candidate in the worker (the ``compile``
stage), ``precompile`` waits for the compiler; ``close`` reports the process's output and its other
threads' CPU time (``other_threads``) and disposes of it.

``ev`` is the :class:`~drkernel.env.evaluation.Evaluation` that runs the stage (imported for the
annotations only: at run time the evaluation imports its stages, never the other way).
"""

from __future__ import annotations

import functools
import time
from typing import TYPE_CHECKING, Any

import torch

from drkernel.env.measure.spot import CHECK_ALL_TIMED, sample_size
from drkernel.env.process.staging import reserve_bytes
from drkernel.env.protocol import LoadRequest
from drkernel.env.result import Stage
from drkernel.env.tasks.prepared import TrialKey

if TYPE_CHECKING:  # (annotations only: at run time the evaluation imports its stages, not the other way)
    from drkernel.env.evaluation import Evaluation

OTHER_THREADS_MS = 0.5
"""CPU milliseconds other threads may spend in a CPU evaluation (honest kernels spend 0: the
worker's only thread of work is the main one)."""

OTHER_THREADS_CUDA_MS = 100.0
OTHER_THREADS_CUDA_SHARE = 0.1
"""On a GPU the CUDA driver's and the profiler's own threads run in the candidate's process: the
56 bundled solutions spent 2-16 ms there against 0.9-3 s on the main thread (H100). Above
``max(100 ms, 10% of the main thread's)`` it is work of the candidate's own."""

TICK_SLACK_NS = 50e6
"""Exited threads are seen only through the process's CPU ticks (10 ms each), whose split between
process and thread is rounded separately: a difference below this is not counted."""


def acquire(ev: Evaluation) -> None:
    t0 = time.monotonic()
    with ev.clock.part("process_start"):
        ev.proc = ev.acquire_fn(ev.device, max(120.0, ev.config.load_timeout_s))
    ev.deadline += time.monotonic() - t0  # starting a worker is the grader's time, not the candidate's
    ev.proc.set_limits(ev.config.memory_limit_mb, ev.config.output_limit_bytes)
    ev.result.details["warm_process"] = bool(getattr(ev.proc, "warm", False))
    ev.cpu_start = (ev.proc.cpu_seconds(), ev.proc.thread_run_ns())  # before any candidate code
    ev.cancel.on_cancel(ev.proc.kill)
    ev.check_cancel()


def output_stage_bytes(ev: Evaluation) -> int:
    """The output stage this evaluation reads (:func:`drkernel.env.process.staging.reserve_bytes`): one
    correctness output, or the kept outputs of the timing request (whole or sampled)."""
    out = ev.refs[("trial", 0)].out
    cfg = ev.config
    kept = cfg.timing_trials if cfg.timing_trials <= CHECK_ALL_TIMED else cfg.spot_checks
    sampled = sample_size(out.numel(), cfg.spot_sample) or out.numel()
    return reserve_bytes(out.numel() * out.element_size(), kept, sampled * out.element_size())


def write_candidate(ev: Evaluation) -> Any:
    cand = ev.proc.workdir / "candidate.py"
    cand.write_text(ev.source, encoding="utf-8")
    return cand


def hold_verdict(ev: Evaluation) -> dict[str, Any] | None:
    """The launch budget's hold probed by this process in the GPU gate's exclusive section (no
    other evaluation's kernel time-slices the probe), once per device while it passes; compiled
    and sized before, in the shared section (Triton's compiler must not hold the GPU alone).
    Called outside any gate section. See :func:`drkernel.env.measure.budget.device_verdict`."""
    if not ev.cuda or ev.config.launch_budget_ms <= 0:
        return None
    from drkernel.env.measure import budget

    known, verdict = budget.known_verdict(ev.device)
    if known:
        return verdict
    with ev.shared():
        if budget.prepare_device(torch, ev.device) is None:
            return None
    with ev.in_gate("exclusive"):
        torch.cuda.synchronize(ev.device)
        return budget.device_verdict(torch, ev.device)


def load(ev: Evaluation) -> None:
    cand = ev.proc.workdir / "candidate.py"
    task = ev.prepared.task
    params, buffers = ev.prepared.shapes(ev.plan.init_seed)
    stage_bytes = 0
    if ev.output_stage() is not None:
        with ev.clock.part("stage_map"):
            stage_bytes = ev.output_stage().reserve(output_stage_bytes(ev), cuda=ev.cuda)
    ev.budget_verdict = hold_verdict(ev)  # before the load's own gate section
    load = functools.partial(
        LoadRequest, role="candidate", task_source=task.source, task_name=task.name, candidate_file=str(cand),
        device="cuda" if ev.cuda else "cpu", task_size=ev.prepared.task_size,
        entry_point=task.entry_point, init_seed=ev.plan.init_seed, kernel_suffix=ev.plan.kernel_suffix,
        parameter_shapes=params, buffer_shapes=buffers, launch_budget_ms=ev.config.launch_budget_ms,
        stage_bytes=stage_bytes, launch_budget_verdict=ev.budget_verdict)
    # The load's host work (the task, the profiler's start, the confinement: no kernel, no
    # candidate code) outside the GPU gate, where a waiting timing does not wait for it; the rest
    # in its shared side. In one request when the worker would probe the hold itself (a kernel).
    if not ev.cuda or ev.config.launch_budget_ms <= 0 or ev.budget_verdict is not None:
        reply = ev.request(load(part="prepare"), ev.config.load_timeout_s, "load_prepare", gated=False)
        ev.worker_parts("load", reply.body.phases_s)
        reply = ev.request(load(part="candidate"), ev.config.load_timeout_s, "load_compile")
    else:
        reply = ev.request(load(), ev.config.load_timeout_s, "load_compile")
    ev.result.compiled = True
    ev.worker_parts("load", reply.body.phases_s)
    ev.completed.add(Stage.COMPILE)
    ev.result.details["isolation"] = reply.body.isolation
    ev.buffers = bool(reply.body.buffers_reloaded)
    if not ev.buffers and buffers:
        with ev.shared():  # the candidate's buffers differ from the reference's: not reloaded
            ev.refs = {("trial", k): ev.prepared.reference(ev.plan.init_seed, TrialKey(s, d), r, False)
                       for k, (d, s, _, r) in enumerate(ev.plan.trials)}


def start_compiler(ev: Evaluation, candidate_file: Any) -> None:
    """On a GPU: fork the compiler for this worker's directory from its zygote
    (:mod:`drkernel.env.process.precompile`), to run beside the references and the load (it never has
    a GPU: the references are still computed before any candidate code can reach one). None
    when off, or for a worker started by exec; a zygote that cannot fork one only means the
    first call compiles."""
    ev.compiler = None
    if not ev.cuda or ev.config.precompile_timeout_s <= 0:
        return
    from drkernel.env.process.precompile import cuda_target, job

    task = ev.prepared.task
    t0 = time.monotonic()
    try:
        with ev.clock.part("precompile_start"):
            ev.compiler = ev.proc.start_compiler(job(
              candidate_file=str(candidate_file), task_source=task.source, task_name=task.name,
              entry_point=task.entry_point, task_size=ev.prepared.task_size, init_seed=ev.plan.init_seed,
              kernel_suffix=ev.plan.kernel_suffix, target=cuda_target(ev.device),
              timeout_s=ev.config.precompile_timeout_s))
        reason = None if ev.compiler is not None else "workers start by exec: no zygote to fork a compiler"
    except Exception as exc:  # noqa: BLE001 - no compiler: the first call compiles
        reason = f"no compiler: {type(exc).__name__}: {exc}"[:200]
    ev.deadline += time.monotonic() - t0  # (a zygote's restart is the grader's time, not the candidate's)
    if reason:
        ev.result.details["precompile"] = {"finished": False, "complete": False, "reason": reason}


def precompile(ev: Evaluation) -> None:
    """On a GPU: wait for the compiler (:mod:`drkernel.env.process.precompile`) outside the GPU gate,
    while the worker is idle with its device synchronised, then kill its process group. The
    first call then loads the kernels instead of compiling them in the gate's shared side.
    Diagnostics only, never a verdict."""
    compiler, ev.compiler = getattr(ev, "compiler", None), None
    if compiler is None:
        return
    if not ev.proc.alive:  # nothing to compile for (and nobody counting its memory)
        compiler.kill("its worker ended")
    with ev.clock.part("precompile"):
        ev.result.details["precompile"] = compiler.wait(
          min(ev.config.precompile_timeout_s, max(ev.deadline - time.monotonic(), 0.0)))
    ev.check_cancel()


def close(ev: Evaluation) -> None:
    plan = getattr(ev, "plan", None)
    if plan is not None:  # its models (the outputs stay cached for evaluations under the same seed)
        ev.prepared.forget(plan.init_seed)
    proc, ev.proc = ev.proc, None  # (closing it kills its compiler, if any still runs)
    if proc is not None:
        ev.result.details["output_bytes"] = proc.output_bytes
        if proc.output_bytes:
            ev.result.details["output_tail"] = proc.output_tail(2000)
        other_threads(ev, proc)
        with ev.clock.part("close"):
            ev.release_fn(proc)


def other_threads(ev: Evaluation, proc: Any) -> None:
    """CPU time the candidate's process spent on threads other than the one that runs its calls,
    from its load to now, read from ``/proc`` by the grader (the candidate cannot hide or forge
    it). The harness runs everything on the main thread (torch with one intra-op thread, BLAS
    with one), so this is work beside or after the calls: a native pool's thread (a TorchScript
    ``fork``, a C extension's), computing off the clock or burning CPU while others are timed."""
    start = getattr(ev, "cpu_start", None)
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
    other_ms = max(live_ns, ticks_ns if ticks_ns > TICK_SLACK_NS else 0.0, 0.0) / 1e6
    main_ms = (threads.get(main_tid, 0) - before.get(main_tid, 0)) / 1e6
    ev.result.details["cpu_ms"] = {"main_thread": round(main_ms, 3), "other_threads": round(other_ms, 3),
                                   "threads": len(threads), "live_other_ms": round(live_ns / 1e6, 3)}
    limit = max(OTHER_THREADS_CUDA_MS, OTHER_THREADS_CUDA_SHARE * main_ms) if ev.cuda \
        else OTHER_THREADS_MS
    if other_ms > limit:
        ev.finding("other_threads", f"{other_ms:.1f} ms of CPU on {max(len(threads) - 1, 1)} other "
                                    "thread(s) of your process")
