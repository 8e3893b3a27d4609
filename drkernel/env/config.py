"""Evaluation settings. Defaults are the protocol of the ``-v0`` suites; a suite's ``env.yaml``
overrides them (see :func:`EvalConfig.from_env_yaml`)."""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
from typing import Any

DISTRIBUTIONS = ("native", "negated", "scaled")

#: env.yaml ``correctness:`` keys, each mapped to its EvalConfig field.
CORRECTNESS_KEYS = {"trials_per_distribution": "trials_per_distribution", "distributions": "distributions",
                    "atol": "atol", "rtol": "rtol", "determinism_check": "determinism_check"}
#: env.yaml ``timing:`` keys, each mapped to its EvalConfig field.
TIMING_KEYS = {"warmup": "warmup", "trials": "timing_trials", "reference_backend": "reference_backend",
               "spot_checks": "spot_checks", "input_pool": "input_pool", "launch_budget_ms": "launch_budget_ms"}


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
    atol: float = 1e-4
    """Absolute tolerance, relative to rms(reference output): |out - ref| <= atol*rms(ref) + rtol*|ref|."""
    rtol: float = 1e-4
    """Relative tolerance, elementwise."""
    determinism_check: bool = True
    """Re-run one trial with memory pre-filled by a different garbage pattern; outputs must agree."""

    # -- timing -----------------------------------------------------------------------------
    measure_performance: bool = True
    """Time reference and candidate (interleaved, same process) when the candidate is correct."""
    warmup: int = 5
    """Untimed calls of each model before timing."""
    timing_trials: int = 50
    """Timed calls of each model; the median is reported."""
    spot_checks: int = 3
    """Timed candidate calls whose outputs are checked against the reference too."""
    input_pool: int = 3
    """Distinct input sets that timed calls rotate through (each call also gets its own transform)."""
    reference_backend: str = "eager"
    """``eager`` or ``torch_compile`` for the timed reference."""
    launch_budget_ms: float = 1.0
    """How long the GPU is held after the L2 flush of each timed call, every SM full
    (:mod:`drkernel.env.budget`), so that the host's launch path of either model, up to about this
    long, is queued before the start event and the events measure device time. On an H100 a 1 ms
    hold cut the spread of one matmul's speedup between evaluations from 5-7% to 1.5% (the flush
    alone, ~0.085 ms, hides less than a two-kernel Python launch path; tests/gpu/placement_probe.py).
    The hold leaves no SM free, so work on another stream cannot run beside it unseen; a worker
    whose start-up probe finds otherwise times without it and says so in
    ``details["timing"]["launch_budget"]``. 0 turns it off (at the defaults, 110 timed calls, it
    costs about 0.11 s of exclusive GPU time per evaluation)."""
    time_hacked: bool = False
    """Also time (and spot-check) candidates the static checks already flagged: for auditing the
    runtime detectors; a flagged candidate's verdict does not change."""
    profile: bool = True
    """Measure coverage (share of forward device time in the candidate's own Triton kernels)."""

    # -- isolation --------------------------------------------------------------------------
    load_timeout_s: float = 120.0
    """Deadline for importing the candidate and building ModelNew (Triton compiles lazily, at launch)."""
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
    return base.with_overrides(warmup=1, timing_trials=3, spot_checks=1, input_pool=2)


__all__ = ["EvalConfig", "DISTRIBUTIONS", "CORRECTNESS_KEYS", "TIMING_KEYS", "cpu_fast"]
