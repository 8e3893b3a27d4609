"""The reference's timing: measured in a clean process, by the candidates' own procedure, cached.

The reference never runs where candidate code has run: hooks, re-registered operators or patched
functions a candidate installs in its own process cannot slow the reference or copy its output,
because the reference is not there. It is timed in a worker of its own (role ``reference``) with
exactly the calls a candidate gets (:func:`drkernel.env.measure.timing.run_calls`: fresh inputs and
parameters per call, the flush, the launch budget, the fences, the profiler on), inside the
grader's exclusive section of the GPU, and the result is kept per::

    (task source digest, entry point, task size, device model, warm-up, timed calls, launch budget,
     reference backend)

for ``reference_max_age_s`` (a long RL run re-measures now and then, so a drifting clock cannot
bias every reward). The measurement runs inside the GPU's exclusive section; an evaluation that
finds a fresh timing there (another one measured it meanwhile) does not measure again.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass, field
from typing import Any

from drkernel.env.measure.attribution import ForgedRecords, cut_windows, top_kernels
from drkernel.env.config import EvalConfig
from drkernel.env.tasks.prepared import PreparedTask
from drkernel.env.protocol import LoadRequest, TimeRequest
from drkernel.env.result import EnvironmentFailure
from drkernel.env.tasks.task import trial_seeds


@dataclass
class ReferenceTiming:
    times_ms: list[float]
    """Device time of each timed call (CPU: host time)."""
    median_ms: float
    top: list[dict[str, Any]] = field(default_factory=list)
    measured_at: float = 0.0
    launch_budget: dict[str, Any] | None = None
    seconds: float = 0.0

    def describe(self) -> dict[str, Any]:
        s = sorted(self.times_ms)
        return {"median_ms": self.median_ms, "min_ms": s[0], "max_ms": s[-1], "n": len(s),
                "measured_at": self.measured_at, "measure_seconds": round(self.seconds, 3), "top": self.top,
                "sm_clock_mhz": (self.launch_budget or {}).get("sm_clock_mhz"),
                "hold": {k: (self.launch_budget or {}).get(k) for k in ("verified", "verified_by", "ms")}}


def timing_key(prepared: PreparedTask, config: EvalConfig) -> tuple:
    device_name = "cpu"
    if prepared.device.startswith("cuda"):
        import torch

        device_name = torch.cuda.get_device_name(prepared.device)
    return (prepared.task.digest, prepared.task.entry_point, prepared.task_size, device_name, config.warmup,
            config.timing_trials, config.launch_budget_ms, config.reference_backend)


def calls_plan(seed: int, config: EvalConfig, negatable: bool, stream: str) -> tuple[list[int], list[float], list[int]]:
    """Seeds, factors and parameter-reload seeds of ``warmup + timing_trials`` calls.

    Factors are powers of two in [1/4, 4], negated at random where the task allows negative inputs:
    exact in floating point, so the grader reproduces each call's inputs bit for bit."""
    import numpy as np

    n = config.warmup + config.timing_trials
    rng = np.random.default_rng(trial_seeds(seed, 1, f"{stream}-factors")[0])
    signs = rng.choice([-1.0, 1.0], size=n) if negatable else np.ones(n)
    scales = 2.0 ** rng.integers(-2, 3, size=n)
    return (trial_seeds(seed, n, f"{stream}-inputs"), [float(a * b) for a, b in zip(signs, scales)],
            trial_seeds(seed, n, f"{stream}-params"))


def measure(prepared: PreparedTask, config: EvalConfig, proc: Any,
            hold_verdict: dict[str, Any] | None = None, release: Any = None) -> ReferenceTiming:
    """Time the reference in ``proc``, a fresh worker, and close it (``release(proc)``, default
    ``proc.close()``; inside the exclusive section a grader's pool only kills it there and reaps it
    later, :meth:`~drkernel.env.process.sandbox.WarmPool.discard`) (raises EnvironmentFailure when
    that fails: the reference is trusted, so its failure is never a candidate's verdict). Call
    inside the GPU's exclusive section. ``hold_verdict``: the grader's probe of the launch budget's
    hold (:func:`drkernel.env.measure.budget.device_verdict`), which the worker adopts like a candidate's:
    reference and candidate are timed with the same answer (a reference probing for itself, beside
    a spare starting up, could time without the hold while candidates time with it)."""
    t0 = time.monotonic()
    seed = int.from_bytes(__import__("os").urandom(8), "little") >> 1
    init_seed = trial_seeds(seed, 1, "reference-init")[0]
    negatable = "negated" in prepared.loaded.allowed_distributions(("negated",))
    seeds, factors, reloads = calls_plan(seed, config, negatable, "reference")
    try:
        proc.set_limits(max(config.memory_limit_mb, 16384), config.output_limit_bytes)
        task = prepared.task
        reply = proc.request(LoadRequest(
            role="reference", task_source=task.source, task_name=task.name,
            device="cuda" if prepared.device.startswith("cuda") else "cpu", task_size=prepared.task_size,
            entry_point=task.entry_point, init_seed=init_seed, reference_backend=config.reference_backend,
            launch_budget_ms=config.launch_budget_ms, launch_budget_verdict=hold_verdict), config.load_timeout_s)
        if not reply.ok:
            raise EnvironmentFailure(f"the reference of {task.name} could not be loaded for timing: "
                                     f"{reply.body.error}")
        reply = proc.request(TimeRequest(seeds=seeds, factors=factors, warmup=config.warmup, reload_seeds=reloads,
                                         spot=False, launch_budget_ms=config.launch_budget_ms),
                             config.timing_timeout_s)
        if not reply.ok:
            raise EnvironmentFailure(f"the reference of {task.name} failed while timed: {reply.body.error}")
    except EnvironmentFailure:
        raise
    except Exception as exc:  # noqa: BLE001 - CandidateFailure of a reference process: the environment's
        raise EnvironmentFailure(f"timing the reference of {prepared.task.name} failed: "
                                 f"{getattr(exc, 'message', exc)}") from exc
    finally:
        if release is not None:
            release(proc)
        else:
            proc.close()
    t = reply.body
    n = config.warmup + config.timing_trials
    if prepared.device.startswith("cuda"):
        try:
            windows = cut_windows(t.events, n, None)
        except ForgedRecords as exc:
            raise EnvironmentFailure(f"the reference's device records are unusable: {exc}") from exc
        times = [w.time_ns / 1e6 for w in windows[config.warmup:]]
        top = top_kernels(windows[config.warmup:], None)
    else:
        times, top = list(t.host_ms[config.warmup:]), []
    if len(times) != config.timing_trials:
        raise EnvironmentFailure(f"the reference's timing returned {len(times)} of {config.timing_trials} calls")
    return ReferenceTiming(times_ms=times, median_ms=statistics.median(times), top=top, measured_at=time.time(),
                           launch_budget=t.launch_budget, seconds=time.monotonic() - t0)


def lookup(prepared: PreparedTask, config: EvalConfig) -> ReferenceTiming | None:
    """The cached timing for this task and protocol, if it is fresh enough."""
    cached = prepared.timings.get(timing_key(prepared, config))
    if cached is not None and time.time() - cached.measured_at < config.reference_max_age_s:
        return cached
    return None


def store(prepared: PreparedTask, config: EvalConfig, timing: ReferenceTiming) -> None:
    prepared.timings[timing_key(prepared, config)] = timing


__all__ = ["ReferenceTiming", "lookup", "store", "measure", "calls_plan", "timing_key"]
