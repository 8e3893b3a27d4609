"""Comparing a candidate's output with the reference's.

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
(:meth:`~drkernel.env.prepared.PreparedTask.sensitivity`: ``sigma_i``, the largest change of element
``i`` when the floating inputs are perturbed by about one unit in the last place) and allows::

    |out - ref| <= atol * rms(ref) + rtol * |ref| + CONDITION_ULPS * sigma_i

``CONDITION_ULPS`` = 64: an fp32 kernel (another summation order, ``tf32x3`` products, ~8 ulp) is
well inside; TF32 (2^-11, ~4,000 ulp) and bf16 arithmetic stay outside, and well-conditioned
elements (``sigma_i`` ~ 0) are judged exactly as before.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass
class Comparison:
    ok: bool
    message: str = ""
    max_abs_err: float | None = None
    max_rel_err: float | None = None
    mismatch_frac: float | None = None

    def to_dict(self) -> dict:
        return {"ok": self.ok, "message": self.message, "max_abs_err": self.max_abs_err,
                "max_rel_err": self.max_rel_err, "mismatch_frac": self.mismatch_frac}


CONDITION_ULPS = 64.0
"""Multiple of the reference's own rounding sensitivity allowed per element (module docstring)."""


def _rms(rabs: torch.Tensor, finite: torch.Tensor, n_finite: torch.Tensor) -> torch.Tensor:
    """Root-mean-square over the finite elements (``finite``, ``n_finite`` of them) of a widened
    tensor given as its magnitudes ``rabs``: a float64 scalar on the device (no read back)."""
    zero = torch.zeros((), dtype=torch.float64, device=rabs.device)
    return (torch.where(finite, rabs.pow(2), zero).sum() / n_finite.clamp_min(1)).sqrt()


def reference_rms(ref: torch.Tensor) -> float | None:
    """``rms(ref)`` over its finite elements, as :func:`compare_outputs` computes it (None for
    integer or empty outputs, or no finite element)."""
    if ref.numel() == 0 or not (ref.is_floating_point() or ref.is_complex()):
        return None
    r = ref.detach().to(torch.complex128 if ref.is_complex() else torch.float64)
    finite = torch.isfinite(r)
    n_finite = finite.sum()
    rms, n = torch.stack([_rms(r.abs(), finite, n_finite), n_finite.to(torch.float64)]).tolist()
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
    # with one read of the results back to the host: every such read waits for this process's turn
    # on a GPU shared with the candidates' processes (seven reads made a comparison 14x slower with
    # 8 evaluations in flight on an H100 than alone).
    wide = torch.complex128 if ref.is_complex() else torch.float64
    o = out.detach().to(ref.device).to(wide)  # move in its own dtype, widen on the device
    r = ref.detach().to(wide)
    ref_finite = torch.isfinite(r)
    both = ref_finite & torch.isfinite(o)
    rabs = r.abs()
    zero = torch.zeros((), dtype=torch.float64, device=r.device)
    n_finite = ref_finite.sum()
    if scale is None:
        rms_t = _rms(rabs, ref_finite, n_finite)
    else:
        rms_t = torch.tensor(float(scale), dtype=torch.float64, device=r.device)
    err = torch.where(both, (o - r).abs(), zero)
    bound = atol * rms_t + rtol * rabs
    if allowance is not None:
        bound = bound + allowance.to(device=r.device, dtype=torch.float64)
    bad = both & (err > bound)
    floor = torch.where(rms_t > 0, rms_t * 1e-6, torch.full_like(rms_t, 1e-30))
    rel = torch.where(both, err / torch.maximum(rabs, floor), zero)
    stats = torch.stack([(~ref_finite).sum().to(torch.float64), (ref_finite & ~both).sum().to(torch.float64),
                         n_finite.to(torch.float64), bad.sum().to(torch.float64), err.max(), rel.max(), rms_t])
    n_ref_nonfinite, n_bad_nonfinite, n_fin, n_bad, max_abs, max_rel, rms = stats.tolist()
    # Non-finite reference entries must be matched exactly (NaN where NaN, same infinity).
    if n_ref_nonfinite:
        nf = ~ref_finite
        same = (torch.isnan(r[nf]) & torch.isnan(o[nf])) | (r[nf] == o[nf])
        if not bool(same.all()):
            return Comparison(False, "non-finite reference values are not matched")
    if n_bad_nonfinite:
        n = int(n_bad_nonfinite)
        return Comparison(False, f"output has {n} NaN/Inf value(s) where the reference is finite",
                          float("inf"), float("inf"), n / r.numel())
    if not n_fin:
        return Comparison(True, "", 0.0, 0.0, 0.0)
    if n_bad:
        gap = torch.where(bad, err - bound, torch.full_like(err, -float("inf")))
        idx = int(torch.argmax(gap.flatten()))
        return Comparison(False, (f"{int(n_bad)} of {int(n_fin)} elements out of tolerance; worst: got "
                                  f"{complex(o.flatten()[idx]) if o.is_complex() else float(o.flatten()[idx]):.6g}, "
                                  f"expected {complex(r.flatten()[idx]) if r.is_complex() else float(r.flatten()[idx]):.6g} "
                                  f"(max abs err {max_abs:.3g}, rms(ref) {rms:.3g})"),
                          max_abs, max_rel, n_bad / n_fin)
    return Comparison(True, "", max_abs, max_rel, 0.0)


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


def lazy_output_reason(out: object, expected_device: torch.device | str) -> str | None:
    """Why ``out`` is not a plain dense tensor with real storage (None when it is)."""
    if type(out) is not torch.Tensor:  # noqa: E721 - subclasses are exactly what we reject
        return f"output is {type(out).__module__}.{type(out).__name__}, not a plain torch.Tensor"
    if out.layout != torch.strided:
        return f"output has layout {out.layout}, not strided"
    if out.device.type == "meta":
        return "output is a meta tensor (no data)"
    if out.device.type != torch.device(expected_device).type:
        return f"output is on {out.device}, expected {expected_device}"
    if out.numel() > 0 and storage_span(out) is None:
        return "output has no allocated storage"
    return None
