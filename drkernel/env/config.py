"""Evaluation settings. Defaults are the protocol of the ``-v0`` suites; a suite's ``env.yaml``
overrides them (see :func:`EvalConfig.from_env_yaml`)."""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
from typing import Any

DISTRIBUTIONS = ("native", "negated", "scaled")
PRECISION_POLICIES = ("reference", "tf32", "bf16", "fp16", "kernelbench", "rms")
"""Names of :data:`drkernel.env.judge.precision.POLICIES` (here without torch, for the command line)."""

#: env.yaml ``correctness:`` keys, each mapped to its EvalConfig field.
CORRECTNESS_KEYS = {"trials_per_distribution": "trials_per_distribution", "distributions": "distributions",
                    "atol": "atol", "rtol": "rtol", "determinism_check": "determinism_check",
                    "precision": "precision"}
#: env.yaml ``timing:`` keys, each mapped to its EvalConfig field.
TIMING_KEYS = {"warmup": "warmup", "trials": "timing_trials", "reference_backend": "reference_backend",
               "spot_checks": "spot_checks", "spot_rate": "spot_rate", "spot_sample": "spot_sample",
               "launch_budget_ms": "launch_budget_ms",
               "min_coverage": "min_coverage"}


@dataclass(frozen=True)
class EvalConfig:
    """How one candidate is graded."""

    device: str = "cpu"
    """``cpu`` (Triton interpreter; timings are CPU timings) or ``cuda``."""
    task_size: str | None = None
    """Value for the ``DRKERNEL_TASK_SIZE`` knob (``full``/``small``); None: ``small`` on cpu, ``full`` on cuda."""

    # -- correctness ------------------------------------------------------------------------
    trials_per_distribution: int = 2
    """Correctness trials for each input distribution, each with fresh inputs from a hidden seed."""
    distributions: tuple[str, ...] = DISTRIBUTIONS
    """Input transforms applied to floating inputs: native, negated (-x), scaled (x * s)."""
    precision: str | None = None
    """How float outputs are judged (:data:`drkernel.env.judge.precision.POLICIES`): ``reference`` (against a
    float64 oracle, as accurate as the reference in its own dtypes), ``tf32``/``bf16``/``fp16``
    (operands may be rounded to that format), ``kernelbench`` (allclose 1e-2 against the reference),
    ``rms`` (``atol``/``rtol`` below). None: the task's ``PRECISION``, else ``reference``. Set here (a
    suite's env.yaml, a run's ``--precision``), it overrides the task's."""
    atol: float = 1e-4
    """Absolute tolerance of the ``rms`` policy (and of the fallback where the reference has no
    float64 oracle), relative to rms(reference output): |out - ref| <= atol*rms(ref) + rtol*|ref|."""
    rtol: float = 1e-4
    """Relative tolerance of the ``rms`` policy, elementwise."""
    determinism_check: bool = True
    """Re-run one trial with memory pre-filled by a different garbage pattern; outputs must agree."""

    # -- timing -----------------------------------------------------------------------------
    measure_performance: bool = True
    """Time the candidate (and the reference, in a process of its own, cached) when it is correct."""
    warmup: int = 5
    """Untimed calls of each model before timing."""
    timing_trials: int = 50
    """Timed calls of each model; the median is reported. Every call gets inputs drawn from its own
    hidden seed (times a power-of-two factor, negated where the task allows) and fresh parameter
    values, so no result can be reused from an earlier call."""
    spot_checks: int = 8
    """At most this many timed outputs are kept and checked against the reference (with 5 timed
    calls or fewer, every one is: a sample would let a cheap output on most of them move the median)."""
    spot_rate: float = 0.15
    """After each timed call the grader keeps its output with this probability (until
    ``spot_checks`` are kept; the last call is kept if none was). The decision is made after the
    call returned, so the candidate cannot know which calls are checked: skipping the work on half
    of 50 calls is caught with probability above 98%."""
    spot_sample: int = 1 << 20
    """Elements read back of a checked timed output holding more than twice this many, at indices
    the grader draws after the call (:mod:`drkernel.env.measure.spot`; smaller outputs come back whole;
    0: always whole). Correctness trials always compare whole outputs."""
    reference_backend: str = "eager"
    """``eager`` or ``torch_compile`` for the timed reference."""
    reference_max_age_s: float = 900.0
    """A reference timing is measured once per (task, device, protocol) and reused for this long."""
    min_coverage: float = 0.5
    """A correct candidate must spend at least this share of its forward's device time in its own
    Triton kernels (on the CPU interpreter: at least this share of the reference's torch work must
    not be redone in torch); below it the verdict is *not correct* (``error.stage == "profiling"``).
    Views, allocations and fills cost nothing; small torch glue passes."""
    launch_budget_ms: float = 1.0
    """How long the GPU is held after the L2 flush of each call, every SM full
    (:mod:`drkernel.env.measure.budget`), so that the host's launch path of either model, up to about this
    long, is queued before the call's window opens and the window measures device time. On an H100
    a 1 ms hold cut the spread of one matmul's speedup between evaluations from 5-7% to 1.5% (the
    flush alone, ~0.085 ms, hides less than a two-kernel Python launch path). The hold leaves no SM
    free, so work on another stream cannot run beside it unseen; a worker whose probe finds
    otherwise times without it and says so in ``details["timing"]["launch_budget"]``. 0 turns it off."""
    time_hacked: bool = False
    """Also time (and spot-check) candidates the static checks already flagged: for auditing the
    runtime detectors; a flagged candidate's verdict does not change."""
    profile: bool = True
    """Attribute the calls' work (the device records between the fences on a GPU, the torch work
    outside own kernels on the CPU): coverage, and with it the ``min_coverage`` verdict, own
    launches, host transfers, side streams. Off only for quick checks where those do not matter."""

    # -- isolation --------------------------------------------------------------------------
    load_timeout_s: float = 120.0
    """Deadline for importing the candidate and building ModelNew (Triton compiles lazily, at launch)."""
    precompile_timeout_s: float = 10.0
    """On a GPU: how long the grader waits, outside the GPU gate, for the compiler forked from the
    worker's zygote beside the load (:mod:`drkernel.env.process.precompile`: a process that never had a GPU,
    confined and audited like the worker, in its own process group); what it does not reach in that
    time compiles in the first call. 0: no compiler (workers started by exec have none either)."""
    call_timeout_s: float = 120.0
    """Deadline for one correctness call (includes Triton JIT compilation on first launch)."""
    timing_timeout_s: float = 300.0
    """Deadline for the whole timing phase."""
    total_timeout_s: float = 300.0
    """Deadline for the whole evaluation, end to end (time spent queueing for a GPU or starting a
    worker process excluded); the per-stage deadlines above are capped by what is left of it."""
    memory_limit_mb: int = 16384
    """Resident memory cap of the candidate process (host RAM); exceeded -> killed, failed result."""
    output_limit_bytes: int = 4 << 20
    """Candidate stdout+stderr cap; more is a flood: the process is killed. The tail is kept."""

    entry_point: str = "Model"
    """Name of the reference class; the candidate must define ``<entry_point>New``."""

    def with_overrides(self, **kwargs: Any) -> "EvalConfig":
        known = {f.name for f in fields(self)}
        unknown = set(kwargs) - known
        if unknown:
            raise ValueError(f"unknown EvalConfig field(s) {sorted(unknown)}; known: {sorted(known)}")
        if "distributions" in kwargs:
            kwargs["distributions"] = tuple(kwargs["distributions"])
        return replace(self, **kwargs)

    def resolved_task_size(self) -> str:
        if self.task_size:
            return self.task_size
        return "small" if self.device == "cpu" else "full"

    def validate(self) -> "EvalConfig":
        if self.device not in ("cpu", "cuda") and not self.device.startswith("cuda:"):
            raise ValueError(f"device must be 'cpu' or 'cuda[:N]', got {self.device!r}")
        bad = [d for d in self.distributions if d not in DISTRIBUTIONS]
        if bad:
            raise ValueError(f"unknown input distribution(s) {bad}; known: {list(DISTRIBUTIONS)}")
        if self.reference_backend not in ("eager", "torch_compile"):
            raise ValueError(f"reference_backend must be 'eager' or 'torch_compile', got {self.reference_backend!r}")
        if self.total_timeout_s <= 0:
            raise ValueError(f"total_timeout_s must be > 0, got {self.total_timeout_s}")
        if not 0 <= self.launch_budget_ms <= 100:
            raise ValueError(f"launch_budget_ms must be in [0, 100], got {self.launch_budget_ms}")
        if self.trials_per_distribution < 1 or self.timing_trials < 1:
            raise ValueError("trials_per_distribution and timing_trials must be >= 1")
        if not 0.0 < self.spot_rate <= 1.0 or self.spot_checks < 1:
            raise ValueError(f"spot_rate must be in (0, 1] and spot_checks >= 1, got {self.spot_rate}, "
                             f"{self.spot_checks}")
        if self.precompile_timeout_s < 0:
            raise ValueError(f"precompile_timeout_s must be >= 0, got {self.precompile_timeout_s}")
        if self.spot_sample < 0:
            raise ValueError(f"spot_sample must be >= 0, got {self.spot_sample}")
        if self.precision is not None:
            from drkernel.env.judge.precision import policy

            policy(self.precision)  # ValueError naming the known policies
        if not 0.0 <= self.min_coverage <= 1.0:
            raise ValueError(f"min_coverage must be in [0, 1], got {self.min_coverage}")
        return self

    @classmethod
    def from_env_yaml(cls, data: dict[str, Any], **overrides: Any) -> "EvalConfig":
        """Build from a suite's parsed ``env.yaml`` (sections ``correctness`` and ``timing``)."""
        kw: dict[str, Any] = {}
        for section, keys in (("correctness", CORRECTNESS_KEYS), ("timing", TIMING_KEYS)):
            values = data.get(section) or {}
            unknown = sorted(set(values) - set(keys))
            if unknown:
                raise ValueError(f"env.yaml '{section}': unknown key(s) {unknown}; allowed: {sorted(keys)}")
            for key, dest in keys.items():
                if key in values:
                    kw[dest] = values[key]
        if "entry_point" in data:
            kw["entry_point"] = data["entry_point"]
        kw.update({k: v for k, v in overrides.items() if v is not None})
        return cls().with_overrides(**kw).validate()


def cpu_fast(config: EvalConfig | None = None) -> EvalConfig:
    """A lighter protocol for the CPU interpreter (tests, CI): fewer trials and timed calls."""
    base = config or EvalConfig()
    return base.with_overrides(warmup=1, timing_trials=3, spot_checks=1, spot_rate=0.5)


__all__ = ["EvalConfig", "DISTRIBUTIONS", "PRECISION_POLICIES", "CORRECTNESS_KEYS", "TIMING_KEYS", "cpu_fast"]
