"""The evaluation's judging stages: the correctness trials, every comparison, and the verdict.

``correctness(ev)`` runs each trial (``checked_call``: one call in the GPU gate's shared side, its
output read and compared), ``determinism(ev)`` re-runs trial 1 over different garbage. ``compare``
judges one output by the evaluation's precision policy (``judge_output``: the float64 oracle, or the
scale-aware tolerance with the conditioning allowance), falling back to the CPU when the device is
short of memory; the timing's spot checks use it too (``compare_spot``). ``verdict(ev)`` decides
compiled, correct and hacked in one place and builds the feedback.

``ev`` is the :class:`~drkernel.env.evaluation.Evaluation` that runs the stage (imported for the
annotations only: at run time the evaluation imports its stages, never the other way).
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

import torch

from drkernel.env.device import release_if_short
from drkernel.env.judge.compare import CONDITION_ULPS, Comparison, compare_outputs, reference_rms
from drkernel.env.judge.feedback import build_feedback
from drkernel.env.judge.precision import judge, near_miss
from drkernel.env.measure.spot import sample_index
from drkernel.env.process.tensor_io import TensorIOError, read_tensor
from drkernel.env.protocol import RunRequest
from drkernel.env.result import EnvironmentFailure, EvalResult, Stage, Stop
from drkernel.env.tasks.prepared import ReferenceOutput

if TYPE_CHECKING:  # (annotations only: at run time the evaluation imports its stages, not the other way)
    from drkernel.env.evaluation import Evaluation


def correctness(ev: Evaluation) -> None:
    details: list[dict[str, Any]] = []
    ev.result.details["trials"] = details
    ev.trials_ok = False
    for k, (dist, tseed, grad, reload) in enumerate(ev.plan.trials):
        ok, out, err = checked_call(ev, RunRequest(seed=tseed, distribution=dist, grad_mode=grad, prefill="nan",
                                                   out_name=f"t{k}", reload_seed=reload),
                                        ev.refs[("trial", k)], f"trial {k + 1}")
        details.append({"distribution": dist, "grad_mode": grad, "fresh_parameters": reload is not None,
                        "ok": ok, **({"error": err} if not ok else {})})
        if k == 0:
            ev.first_out = out
        if not ok:
            raise Stop
    ev.trials_ok = True


def determinism(ev: Evaluation) -> None:
    """Trial 1 again with memory pre-filled by a different garbage pattern (stale reads)."""
    if not ev.config.determinism_check or ev.first_out is None:
        return
    dist, tseed, _, reload = ev.plan.trials[0]
    ref = ev.refs[("trial", 0)]
    ok, out, _ = checked_call(ev, RunRequest(seed=tseed, distribution=dist, grad_mode="no_grad",
                                             prefill="pattern", out_name="det", reload_seed=reload),
                                  ref, "determinism re-run")
    same = ok and out is not None and compare(ev, out, ev.first_out).ok
    if not same:
        ev.trials_ok = False
        ev.finding("stale_memory", "the output changed when freed memory held different garbage")
        ev.fail(Stage.CORRECTNESS, "output changes when memory is pre-filled with different garbage "
                "(reads of uninitialised or stale memory)")
        raise Stop


def checked_call(ev: Evaluation, req: RunRequest, ref: ReferenceOutput,
                 label: str) -> tuple[bool, torch.Tensor | None, str | None]:
    """One correctness call. Returns (ok, candidate output or None, error message or None).

    The call, the read of its output (a GPU read is GPU work: not during a timing) and the
    comparison hold the GPU's shared side once: each entry waits behind every timing queued
    meanwhile (writer preference), so three entries per call made an evaluation wait three
    times as often."""
    with ev.shared():
        return checked_call_once(ev, req, ref, label)


def checked_call_once(ev: Evaluation, req: RunRequest, ref: ReferenceOutput,
                      label: str) -> tuple[bool, torch.Tensor | None, str | None]:
    req = RunRequest(**{**req.__dict__, "prefill_bytes": ref.nbytes})
    desc = f"{label} ({req.distribution} inputs, {req.grad_mode}, shapes {ref.shapes})"
    reply = ev.request(req, ev.config.call_timeout_s, "correctness", desc=desc)
    ev.calls += 1
    r = reply.body
    ev.run_replies.append(r)
    if r.interpreter:  # what the CPU interpreter decided that a GPU decides otherwise (autotune's config)
        said = ev.result.details.setdefault("interpreter", [])
        said.extend(x for x in r.interpreter[:8] if x not in said and len(said) < 8)
    ev.worker_parts("run", r.phases_s)
    if len(ev.run_replies) == 1:
        ev.worker_parts("first_run", r.phases_s)
    ev.clock.add("transfers", r.write_s)  # measured in the worker, inside the correctness request
    ev.clock.add("correctness", -r.write_s)
    if r.lazy:
        ev.finding("lazy_output", r.lazy)
        return trial_failed(ev, f"{desc}: {r.lazy}")
    if r.not_tensor:
        return trial_failed(ev, f"{desc}: {r.not_tensor}")
    if r.mutated:
        ev.finding("input_mutated", f"inputs {r.mutated} changed during {label}")
    if r.aliases_input and not ref.aliases_input:
        ev.finding("output_aliases_input", f"{label}")
    if r.dense is False and ref.dense:
        ev.finding("lazy_output", f"{label}: the output is not dense (e.g. an expanded constant)")
    if r.strides is not None and ref.contiguous and ref.out.numel() > 1 \
            and not _contiguous_strides(list(ref.out.shape), r.strides):
        # The values are compared in row-major order; the layout is part of the result too (a
        # transposed view of a straight copy is not the transpose the task materialises).
        return trial_failed(ev, f"{desc}: the output is laid out with strides {tuple(r.strides)}, the "
                                f"reference's is contiguous {tuple(ref.out.stride())}: return it in that "
                                "layout (.contiguous() in your kernel's output, not a view)")
    try:
        with ev.clock.part("transfers"):
            out = read_tensor(r.out, ev.proc.workdir, ref.out.device, ev.output_stage())
            if isinstance(r.out, dict) and isinstance(r.out.get("file"), str):
                (ev.proc.workdir / r.out["file"]).unlink(missing_ok=True)
    except (TensorIOError, OSError, TypeError, KeyError) as exc:
        return trial_failed(ev, f"{desc}: unreadable output ({exc})")
    with ev.clock.part("compare"):
        cmp = compare(ev, out, ref)
    if not cmp.ok:
        ev.result.details.setdefault("first_failure", {"trial": desc, **cmp.to_dict()})
        return trial_failed(ev, f"{desc}: {cmp.message}", out)
    if r.mutated:
        return trial_failed(ev, f"{desc}: the candidate modified its input(s) {r.mutated}", out)
    return True, out, None


def trial_failed(ev: Evaluation, message: str,
                 out: torch.Tensor | None = None) -> tuple[bool, torch.Tensor | None, str]:
    ev.fail(Stage.CORRECTNESS, message)
    return False, out, message


def compare_spot(ev: Evaluation, got: torch.Tensor, shape: Any, spot: ReferenceOutput,
                 plan: tuple[int, int]) -> Comparison:
    """A checked timed output: whole, or the elements at the plan's indices (drkernel.env.measure.spot)
    against the same elements of the reference, within the whole output's tolerance."""
    ref = spot.out
    if plan[1] <= 0 or ref.numel() <= 0:  # sent back whole (sample_index gives no indices)
        return compare(ev, got, spot)
    if shape != list(ref.shape):
        return Comparison(False, f"shape mismatch: got {str(shape)[:80]}, expected {tuple(ref.shape)}")
    return compare(ev, got, spot, sample=plan)


def compare(ev: Evaluation, out: torch.Tensor, ref: ReferenceOutput | torch.Tensor,
            sample: tuple[int, int] | None = None) -> Comparison:
    """Compare on the reference's device; a device out of memory (the candidate may hold most of
    it) falls back to the CPU. ``ref``: a reference output, judged by the evaluation's precision
    policy (:func:`judge_output`), or a plain tensor (the determinism re-run against the first
    output: the scale-aware tolerance). ``sample``: ``(seed, size)`` of a checked timed output
    sent back as a sample (drkernel.env.measure.spot): its elements of the reference, the oracle and the
    sensitivity, within the whole output's scale. Any other failure here is the grader's
    (EnvironmentFailure)."""
    try:
        try:
            return judge_output(ev, out, ref, sample, cpu=False)
        except torch.OutOfMemoryError:
            torch.cuda.empty_cache()
            return judge_output(ev, out.cpu(), ref, sample, cpu=True)
    except Exception as exc:  # noqa: BLE001
        raise EnvironmentFailure(f"comparing outputs failed in the grader: {type(exc).__name__}: {exc}") from exc


def judge_output(ev: Evaluation, out: torch.Tensor, ref: ReferenceOutput | torch.Tensor,
                 sample: tuple[int, int] | None, cpu: bool) -> Comparison:
    """One comparison (:func:`compare`): integer outputs exactly; float outputs by the policy:
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
        return compare_outputs(out, r, ev.atol, ev.rtol, scale=scale)
    pol = ev.policy
    if pol.rule == "allclose":
        return compare_outputs(out, r, pol.atol, pol.rtol, scale=1.0)
    record = ev.result.details["precision"]
    record.setdefault("oracle", spot.oracle_note)
    if pol.rule == "oracle" and spot.oracle is not None:
        oracle = pick(spot.oracle)
        loose = pick(spot.rounded(pol.operands)) if pol.operands and spot.rounded else None
        cmp = judge(out, r, oracle, loose=loose)
        if not cmp.ok and near_miss(cmp) and spot.sensitivity is not None and not cpu:
            sigma = sensitivity(ev, spot)
            if sigma is not None:
                second = judge(out, r, oracle, loose=loose, sigma=pick(sigma))
                if second.ok:
                    conditioned(ev, cmp, r.numel())
                cmp = second if second.ok else cmp
        measured(ev, cmp)
        return cmp
    if pol.rule == "oracle":
        record["fallback"] = record.get("fallback", 0) + 1  # no oracle: the scale-aware tolerance
    cmp = compare_outputs(out, r, ev.atol, ev.rtol, scale=scale)
    if cmp.ok or spot.sensitivity is None or cmp.max_abs_err is None or cmp.max_abs_err == float("inf"):
        return cmp
    sigma = sensitivity(ev, spot) if not cpu else None
    if sigma is None:
        return cmp
    second = compare_outputs(out, r, ev.atol, ev.rtol, allowance=CONDITION_ULPS * pick(sigma), scale=scale)
    if second.ok:
        conditioned(ev, cmp, r.numel())
    return second if second.ok else cmp


def sensitivity(ev: Evaluation, spot: ReferenceOutput) -> torch.Tensor | None:
    """The oracle's sensitivity for a failed comparison's second look, or None where the
    device has no memory for its forwards (the first verdict stands; a sensitivity would only
    have loosened it)."""
    try:
        return spot.sensitivity(spot.out)
    except torch.OutOfMemoryError:
        if ev.cuda:
            release_if_short(ev.device)
        return None


def conditioned(ev: Evaluation, first: Comparison, n: int) -> None:
    """A comparison that passed only with the sensitivity allowance (``details["ill_conditioned"]``)."""
    conditioned = ev.result.details.setdefault("ill_conditioned", {"checks": 0, "elements": 0})
    conditioned["checks"] += 1
    conditioned["elements"] = max(conditioned["elements"], round((first.mismatch_frac or 0.0) * n))


def measured(ev: Evaluation, cmp: Comparison) -> None:
    """The oracle's measurements of the comparison furthest from the float64 value, by error
    relative to the reference's own (``details["precision"]["worst"]``)."""
    p = cmp.precision or {}
    ratio = p.get("rms_err", 0.0) / max(p.get("reference_rms_err", 0.0), 1e-300)
    record = ev.result.details["precision"]
    record["checks"] = record.get("checks", 0) + 1
    if ratio >= record.get("worst_ratio", -1.0):
        record["worst_ratio"], record["worst"] = ratio, p


def verdict(ev: Evaluation) -> EvalResult:
    """compiled: the COMPILE stage completed. correct: every correctness trial matched, and every
    stage the candidate entered completed without error (a kernel that raises while timed, or
    does most of its work outside its own kernels, is not correct). passed = compiled and
    correct and not hacked (EvalResult.passed)."""
    r = ev.result
    r.compiled = Stage.COMPILE in ev.completed
    r.correct = (r.compiled and bool(ev.trials_ok) and r.error is None
                 and all(s in ev.completed for s in ev.entered))
    r.hacked = bool(r.hack_reasons)
    if r.error is not None and r.error.stage != Stage.PROFILING.value:  # no numbers for a failed candidate
        r.speedup = r.coverage = r.kernel_ms = r.reference_ms = None
    r.details["stages"] = [s.value for s in ev.entered]
    r.details["stage_seconds"] = ev.clock.seconds
    if ev.gate_holds:
        shared = [t for side, t in ev.gate_holds if side == "shared"]
        r.details["gpu_gate"] = {"shared_entries": len(shared), "shared_s": round(sum(shared), 4),
                                 "shared_max_s": round(max(shared, default=0.0), 4),
                                 "exclusive_s": round(sum(t for side, t in ev.gate_holds if side != "shared"), 4)}
    r.details["eval_seconds"] = round(time.monotonic() - ev.t0, 3)
    r.feedback = build_feedback(r)
    return r


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
