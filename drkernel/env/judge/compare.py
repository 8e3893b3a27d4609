"""Comparing a candidate's output with the reference's: the scale-aware tolerance below, used for
integer outputs (exactly), the ``rms`` and ``kernelbench`` precision policies, the determinism re-run
and where a reference has no float64 oracle. Float outputs are otherwise judged against that oracle
(:mod:`drkernel.env.judge.precision`).

Tolerance (per element, in float64)::

    |out - ref| <= atol * rms(ref) + rtol * |ref|

``atol`` is relative to the reference output's root-mean-square, so an all-zero output fails when
the true output is tiny (KernelBench issue #165: softmax outputs ~4e-6 pass ``atol=1e-2``), and the
test does not depend on the problem's units. fp32 defaults (1e-4, 1e-4) pass a different fp32
summation order and fail fp16/bf16 arithmetic and TF32 matrix products. NaN or Inf in the output
never passes where the reference is finite; where the reference itself is NaN/Inf the candidate
must match it exactly (same NaN positions, same infinities).

**Ill-conditioned elements.** Where an output element is a small difference of large terms (a
product of scaled inputs added to a scaled residual, then clamped: most of the output saturates,
``rms(ref)`` stays small while the terms are 100x larger), any fp32-accurate kernel errs by far more
than ``atol * rms(ref)``. The grader then measures the reference's own sensitivity to rounding
(:meth:`~drkernel.env.tasks.prepared.PreparedTask.sensitivity`: ``sigma_i``, the largest change of element
``i`` when the floating inputs are perturbed by about one unit in the last place) and allows::

    |out - ref| <= atol * rms(ref) + rtol * |ref| + CONDITION_ULPS * sigma_i

``CONDITION_ULPS`` = 64: an fp32 kernel (another summation order, ``tf32x3`` products, ~8 ulp) is
well inside; TF32 (2^-11, ~4,000 ulp) and bf16 arithmetic stay outside, and well-conditioned
elements (``sigma_i`` ~ 0) are judged exactly as before.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import torch


@dataclass
class Comparison:
    ok: bool
    message: str = ""
    max_abs_err: float | None = None
    max_rel_err: float | None = None
    mismatch_frac: float | None = None
    precision: dict | None = None
    """The oracle's measurements (:func:`drkernel.env.judge.precision.judge`), when it judged."""

    def to_dict(self) -> dict:
        d = {"ok": self.ok, "message": self.message, "max_abs_err": self.max_abs_err,
             "max_rel_err": self.max_rel_err, "mismatch_frac": self.mismatch_frac}
        if self.precision is not None:
            d["precision"] = self.precision
        return d


CONDITION_ULPS = 64.0
"""Multiple of the reference's own rounding sensitivity allowed per element (module docstring)."""


CHUNK = 1 << 24
"""Elements compared per pass of the comparison's loop: its float64 temporaries take at most a few
times 128 MiB whatever the output's size (a 64M-element output widened whole took ~3.5 GiB per
comparison; with several evaluations in flight the grader's CUDA cache outgrew its share and it
emptied it, which waits for the device, every few evaluations)."""


def _wide(t: torch.Tensor) -> torch.dtype:
    return torch.complex128 if t.is_complex() else torch.float64


def _chunks(n: int) -> range:
    return range(0, n, CHUNK)


FUSED = True
"""Float outputs on a GPU are compared by the kernels of :mod:`drkernel.env.judge.compare_kernels` (one
pass over the output and the reference); False: the torch operations below, everywhere."""


def _fused(*tensors: torch.Tensor) -> bool:
    if not FUSED:
        return False
    from drkernel.env.judge import compare_kernels

    return compare_kernels.applies(*tensors)


def _fused_failed(exc: Exception) -> None:
    """The kernels could not run here (Triton cannot compile, its cache is not writable...): the
    torch path from now on, said once. Out of memory is not this (the caller's fallback handles it)."""
    global FUSED
    if isinstance(exc, torch.OutOfMemoryError):
        raise exc
    FUSED = False
    warnings.warn(f"drkernel: the fused comparison kernels failed ({type(exc).__name__}: {str(exc)[:200]}); "
                  "comparing with torch operations from now on", RuntimeWarning, stacklevel=3)


def _rms_parts(rf: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``(rms, n_finite)`` of a flat reference over its finite elements, as device scalars (float64,
    int64), chunk by chunk: no read back."""
    if _fused(rf):
        from drkernel.env.judge import compare_kernels

        try:
            return compare_kernels.rms_parts(rf.contiguous())
        except Exception as exc:  # noqa: BLE001 - see _fused_failed
            _fused_failed(exc)
    sq = torch.zeros((), dtype=torch.float64, device=rf.device)
    n_finite = torch.zeros((), dtype=torch.int64, device=rf.device)
    for s in _chunks(rf.numel()):
        r = rf[s:s + CHUNK].to(_wide(rf))
        fin = torch.isfinite(r)
        n_finite += fin.sum()
        sq += torch.where(fin, r.abs().square(), 0.0).sum()
    return (sq / n_finite.clamp_min(1)).sqrt(), n_finite


def reference_rms(ref: torch.Tensor) -> float | None:
    """``rms(ref)`` over its finite elements, as :func:`compare_outputs` computes it (None for
    integer or empty outputs, or no finite element)."""
    if ref.numel() == 0 or not (ref.is_floating_point() or ref.is_complex()):
        return None
    rms_t, n_finite = _rms_parts(ref.detach().reshape(-1))
    rms, n = torch.stack([rms_t, n_finite.to(torch.float64)]).tolist()
    return rms if n else None


def compare_outputs(out: torch.Tensor, ref: torch.Tensor, atol: float, rtol: float,
                    allowance: torch.Tensor | None = None, scale: float | None = None) -> Comparison:
    """``allowance``: per-element extra tolerance (float64, ``ref``'s shape and device), e.g.
    ``CONDITION_ULPS * sigma`` for ill-conditioned outputs; None = none. ``scale``: the ``rms(ref)``
    to use (a sample of an output is judged on the whole output's, :func:`reference_rms`); None =
    ``ref``'s own."""
    if out.shape != ref.shape:
        return Comparison(False, f"shape mismatch: got {tuple(out.shape)}, expected {tuple(ref.shape)}")
    if out.dtype != ref.dtype:
        return Comparison(False, f"dtype mismatch: got {out.dtype}, expected {ref.dtype}")
    if ref.numel() == 0:
        return Comparison(True, "", 0.0, 0.0, 0.0)
    if not (ref.is_floating_point() or ref.is_complex()):
        eq = out.to(ref.device) == ref  # spot checks read the candidate's output back on the CPU
        bad = (~eq).sum().item()
        return Comparison(bad == 0, "" if bad == 0 else f"{bad} of {ref.numel()} integer elements differ",
                          None, None, bad / ref.numel())
    # Compare on the reference's device (a GPU compares 64M elements in milliseconds), in float64,
    # in chunks of CHUNK elements (bounded memory), with one read of the results back to the host:
    # every such read waits for this process's turn on a GPU shared with the candidates' processes
    # (seven reads made a comparison 14x slower with 8 evaluations in flight on an H100 than alone).
    of, rf = out.detach().reshape(-1), ref.detach().reshape(-1)  # row-major order (copies if strided)
    af = allowance.reshape(-1) if allowance is not None else None
    dev, wide = rf.device, _wide(rf)
    if scale is None:
        rms_t, n_fin_t = _rms_parts(rf)
    else:
        rms_t, n_fin_t = torch.tensor(float(scale), dtype=torch.float64, device=dev), None
    counts = None
    if _fused(of, rf):  # one pass over both (drkernel.env.judge.compare_kernels): the same counts and maxima
        from drkernel.env.judge import compare_kernels

        try:
            counts, maxima = compare_kernels.stats(of.contiguous(), rf.contiguous(), af, rms_t, atol, rtol)
        except Exception as exc:  # noqa: BLE001 - see _fused_failed
            _fused_failed(exc)
    if counts is None:
        floor = torch.where(rms_t > 0, rms_t * 1e-6, torch.full_like(rms_t, 1e-30))
        counts = torch.zeros(3, dtype=torch.int64, device=dev)  # ref non-finite, output non-finite there, bad
        maxima = torch.zeros(2, dtype=torch.float64, device=dev)  # max abs err, max rel err (both >= 0)
        for s in _chunks(rf.numel()):
            o, r, ref_finite, both, err, bound, bad = _chunk(of, rf, af, s, dev, wide, atol, rtol, rms_t)
            rel = torch.where(both, err / torch.maximum(r.abs(), floor), 0.0)
            counts += torch.stack([(~ref_finite).sum(), (ref_finite & ~both).sum(), bad.sum()])
            maxima = torch.maximum(maxima, torch.stack([err.max(), rel.max()]))
    n_fin_t = n_fin_t if n_fin_t is not None else rf.numel() - counts[0]
    stats = torch.cat([counts.to(torch.float64), n_fin_t.reshape(1).to(torch.float64), maxima, rms_t.reshape(1)])
    n_ref_nonfinite, n_bad_nonfinite, n_bad, n_fin, max_abs, max_rel, rms = stats.tolist()
    # Non-finite reference entries must be matched exactly (NaN where NaN, same infinity).
    if n_ref_nonfinite and not _nonfinite_matched(of, rf, dev):
        return Comparison(False, "non-finite reference values are not matched")
    if n_bad_nonfinite:
        n = int(n_bad_nonfinite)
        return Comparison(False, f"output has {n} NaN/Inf value(s) where the reference is finite",
                          float("inf"), float("inf"), n / rf.numel())
    if not n_fin:
        return Comparison(True, "", 0.0, 0.0, 0.0)
    if n_bad:
        got, expected = _worst(of, rf, af, dev, wide, atol, rtol, rms_t)
        return Comparison(False, (f"{int(n_bad)} of {int(n_fin)} elements out of tolerance; worst: got "
                                  f"{got:.6g}, expected {expected:.6g} "
                                  f"(max abs err {max_abs:.3g}, rms(ref) {rms:.3g})"),
                          max_abs, max_rel, n_bad / n_fin)
    return Comparison(True, "", max_abs, max_rel, 0.0)


def _chunk(of: torch.Tensor, rf: torch.Tensor, af: torch.Tensor | None, s: int, dev: torch.device,
           wide: torch.dtype, atol: float, rtol: float, rms_t: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """One chunk, widened on the device: ``(o, r, ref_finite, both, err, bound, bad)`` with
    ``err = |o - r|`` where both are finite (0 elsewhere), ``bound = atol * rms + rtol * |r|
    (+ allowance)``, ``bad = both & (err > bound)``."""
    o = of[s:s + CHUNK].to(dev).to(wide)  # move in its own dtype, widen on the device
    r = rf[s:s + CHUNK].to(wide)
    ref_finite = torch.isfinite(r)
    both = ref_finite & torch.isfinite(o)
    err = torch.where(both, (o - r).abs(), 0.0)
    bound = atol * rms_t + rtol * r.abs()
    if af is not None:
        bound = bound + af[s:s + CHUNK].to(device=dev, dtype=torch.float64)
    return o, r, ref_finite, both, err, bound, both & (err > bound)


def _nonfinite_matched(of: torch.Tensor, rf: torch.Tensor, dev: torch.device) -> bool:
    """Whether the output matches the reference exactly wherever the reference is NaN or infinite
    (NaN where NaN, the same infinity): only run when the reference has such elements."""
    unmatched = torch.zeros((), dtype=torch.int64, device=dev)
    for s in _chunks(rf.numel()):
        o, r = of[s:s + CHUNK].to(dev).to(_wide(rf)), rf[s:s + CHUNK].to(_wide(rf))  # (exact: widened)
        same = (torch.isnan(r) & torch.isnan(o)) | (r == o)
        unmatched += (~torch.isfinite(r) & ~same).sum()
    return not int(unmatched)


def _worst(of: torch.Tensor, rf: torch.Tensor, af: torch.Tensor | None, dev: torch.device, wide: torch.dtype,
           atol: float, rtol: float, rms_t: torch.Tensor) -> tuple[complex | float, complex | float]:
    """The candidate's and the reference's values where ``err - bound`` is largest among the
    elements out of tolerance (the first such element on ties): a failure's message only."""
    best, where = -float("inf"), 0
    for s in _chunks(rf.numel()):
        _, _, _, _, err, bound, bad = _chunk(of, rf, af, s, dev, wide, atol, rtol, rms_t)
        gap = torch.where(bad, err - bound, -float("inf"))
        k = int(torch.argmax(gap))
        g = float(gap[k])
        if g > best:
            best, where = g, s + k
    o, r = of[where].to(dev), rf[where]
    return (complex(o) if o.is_complex() else float(o)), (complex(r) if r.is_complex() else float(r))


def storage_span(t: torch.Tensor) -> tuple[int, int] | None:
    """``[start, end)`` byte addresses of the tensor's storage, or None if it has none."""
    try:
        st = t.untyped_storage()
        start = st.data_ptr()
        n = st.nbytes()
    except Exception:  # noqa: BLE001 - tensors without storage (meta, some subclasses)
        return None
    if n == 0 or start == 0:
        return None
    return start, start + n


def aliases(out: torch.Tensor, inputs: list[torch.Tensor]) -> bool:
    """True when ``out``'s storage overlaps any input's storage."""
    o = storage_span(out)
    if o is None:
        return False
    for t in inputs:
        s = storage_span(t)
        if s is not None and o[0] < s[1] and s[0] < o[1]:
            return True
    return False


def is_dense(t: torch.Tensor) -> bool:
    """Every element has its own memory: no zero strides over dimensions of size > 1 (``expand``),
    and the storage is large enough to hold all elements."""
    if any(st == 0 and sz > 1 for st, sz in zip(t.stride(), t.shape)):
        return False
    span = storage_span(t)
    return t.numel() == 0 or (span is not None and span[1] - span[0] >= t.numel() * t.element_size())


type_name, _type_module = type.__dict__["__name__"].__get__, type.__dict__["__module__"].__get__
"""A class's name and module read through ``type``'s own descriptors (``cls.__name__`` is looked up
on the metaclass first, and a candidate's metaclass can answer it with its code)."""


def lazy_output_reason(out: object, expected_device: torch.device | str) -> str | None:
    """Why ``out`` is not a plain dense tensor with real storage (None when it is)."""
    if type(out) is not torch.Tensor:  # noqa: E721 - subclasses are exactly what we reject
        # (the names through type's own descriptors: a metaclass of the candidate's could answer
        # ``__module__`` or ``__name__`` with its code)
        kind = type(out)
        return f"output is {_type_module(kind)}.{type_name(kind)}, not a plain torch.Tensor"
    if out.layout != torch.strided:
        return f"output has layout {out.layout}, not strided"
    if out.device.type == "meta":
        return "output is a meta tensor (no data)"
    if out.device.type != torch.device(expected_device).type:
        return f"output is on {out.device}, expected {expected_device}"
    if out.numel() > 0 and storage_span(out) is None:
        return "output has no allocated storage"
    return None
