"""Precision-aware correctness: a candidate's error against the float64 oracle, judged by the
reference's own error against it.

Notation, per output element ``i`` (all in float64): ``o`` the oracle (:mod:`drkernel.env.oracle`),
``r`` the reference in the task's dtypes, ``c`` the candidate, ``e_r = |r - o|``, ``e_c = |c - o|``;
``E_r = rms(e_r)``; ``ulp_out(o)`` the spacing of the output's dtype at ``|o|`` and ``ulp_32(o)``
float32's (the precision an honest kernel computes in; float64 for float64 outputs)::

    floor_i = A_OUT * ulp_out(o_i) + A_WORK * ulp_32(o_i)           what no kernel need beat
    s_i     = E_r * (1 + |o_i| / rms(o))                             the reference's error scale there

    norm:     rms(e_c) <= K_NORM * E_r + rms(floor)
    element:  e_c_i    <= K_ELEM * (e_r_i + s_i) + floor_i [+ K_SENS * sigma_i]

The **norm** test is the precision verdict: a kernel about as accurate as the reference passes
whatever its summation order or rounding (a different order, split-K, ``tf32x3`` products, one
rounding at the store where eager rounds after every op: ``rms(e_c) <= E_r`` or a small multiple);
TF32, fp16, bf16 or fp8 arithmetic in an fp32 computation errs ~2^13x (TF32) or more above an fp32
reference's ``E_r``, and the test holds whatever else the output contains: a large residual or
offset adds its own rounding to both sides, not a tolerance (``atol * rms(ref)`` did). The
**element** test catches a localised error (an edge tile, one row) that a norm dilutes.

**Discontinuities.** Where the output jumps (``round``, ``floor``, comparisons, a clamp's edge), an
input within an ulp of the jump lands on either side: the reference itself then differs from the
oracle by a whole step in a few elements. Elements out of the element bound are *flips*; the
candidate may show at most ``F_FLIPS`` times as many as the reference shows against the same bound,
none larger than ``2 * max(e_r)`` (so a reference without flips allows none: an off-by-one edge
element fails).

**Ill-conditioned elements.** Where an element is a small difference of large terms, an
fp32-accurate kernel errs by the terms' rounding while the reference may, by chance, be exact there.
When the element test fails, it is repeated with ``K_SENS * sigma_i``: ``sigma_i`` is how much the
oracle's element moves when every floating input is perturbed by one float32 unit in the last place
(:meth:`drkernel.env.prepared.PreparedTask.sensitivity`), the scale of an fp32 kernel's error there.

**Non-finite values.** Where the reference is NaN/Inf, the candidate matches it, or (the reference
overflowed where the oracle is finite) is within ``floor_i + K_ELEM * E_r`` of the oracle. Where the
reference is finite, the candidate must be. Where only the oracle is not finite, the reference
stands in for it.

Constants and the corpus they were derived on: ``docs/precision.md``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from drkernel.env.compare import CHUNK, Comparison

K_NORM = 4.0
"""Error norm allowed as a multiple of the reference's own (docs/precision.md)."""
K_ELEM = 16.0
"""Per-element error allowed as a multiple of the reference's error scale there."""
A_OUT = 1.0
"""Units in the last place of the output's dtype that are always allowed (one rounding at the store
may land on the other side of a tie from the correctly rounded value)."""
A_WORK = 16.0
"""float32 units in the last place always allowed (fp32 transcendentals such as Triton's ``exp``
through ``ex2.approx`` err a few ulp where libm errs half of one)."""
K_SENS = 16.0
"""Multiple of the oracle's sensitivity to a one-ulp float32 perturbation of the inputs allowed at
ill-conditioned elements."""
F_FLIPS = 4.0
"""Elements out of the element bound allowed, as a multiple of the reference's own."""


@dataclass(frozen=True)
class Policy:
    """How a float output is judged. ``rule``: ``oracle`` (this module), ``allclose`` (``|c - r| <=
    atol + rtol * |r|`` against the reference, KernelBench's test) or ``rms`` (the scale-aware
    tolerance ``|c - r| <= atol * rms(r) + rtol * |r|``, :func:`~drkernel.env.compare.compare_outputs`).
    ``operands``: for ``oracle``, a format the inputs and parameters may be rounded to before the
    arithmetic (the error of the oracle on so rounded operands is allowed beside the reference's)."""

    name: str
    rule: str
    operands: str | None = None
    atol: float | None = None
    rtol: float | None = None
    description: str = ""


POLICIES: dict[str, Policy] = {p.name: p for p in (
    Policy("reference", "oracle", description="as accurate as the reference in its own dtypes (default: an fp32 "
                                              "task is fp32-accurate, a bf16 task bf16-accurate)"),
    Policy("tf32", "oracle", operands="tf32", description="as accurate as the task computed from operands "
                                                          "rounded to TF32 (10-bit mantissa): TF32 tensor-core "
                                                          "products allowed"),
    Policy("bf16", "oracle", operands="bf16", description="operands may be rounded to bfloat16"),
    Policy("fp16", "oracle", operands="fp16", description="operands may be rounded to float16"),
    Policy("kernelbench", "allclose", atol=1e-2, rtol=1e-2,
           description="torch.allclose(atol=1e-2, rtol=1e-2) against the reference, as KernelBench "
                       "(for comparing with published numbers; pays TF32 and half precision)"),
    Policy("rms", "rms", description="the scale-aware tolerance atol * rms(ref) + rtol * |ref| against the "
                                     "reference (the suite's atol/rtol, a task's TOLERANCE)"),
)}


def policy(name: str) -> Policy:
    try:
        return POLICIES[name]
    except KeyError:
        raise ValueError(f"unknown precision policy {name!r}; known: {sorted(POLICIES)}") from None


_MANTISSA = {"tf32": 10, "bf16": 7, "fp16": 10}


def round_operand(x: torch.Tensor, fmt: str) -> torch.Tensor:
    """``x`` rounded to ``fmt``'s precision (nearest, ties to even), kept in ``x``'s dtype (float64
    for the oracle): ``tf32`` keeps 10 explicit mantissa bits and float32's range, ``bf16``/``fp16``
    are the torch dtypes (fp16 with its range: overflow is part of using it)."""
    if fmt == "bf16":
        return x.to(torch.bfloat16).to(x.dtype)
    if fmt == "fp16":
        return x.to(torch.float16).to(x.dtype)
    bits = _MANTISSA[fmt]
    mant, exp = torch.frexp(x.to(torch.float64))
    scale = float(1 << (bits + 1))
    return torch.ldexp(torch.round(mant * scale) / scale, exp).to(x.dtype)


def _precision_bits(dtype: torch.dtype) -> int:
    return {torch.float16: 11, torch.bfloat16: 8, torch.float32: 24, torch.float64: 53}.get(dtype, 24)


def ulp(mag: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """Spacing of ``dtype``'s values at ``mag`` (float64, >= 0): ``2^(e - p)`` for ``mag = m 2^e``,
    ``m`` in [0.5, 1), ``p`` the precision in bits; the subnormal spacing below the normal range."""
    p = _precision_bits(dtype)
    fi = torch.finfo(dtype if dtype in (torch.float16, torch.bfloat16, torch.float32, torch.float64) else torch.float32)
    lowest = math.log2(fi.smallest_normal) + 1 - p  # exponent of the subnormal spacing
    _, e = torch.frexp(mag)
    return torch.exp2(torch.clamp(e.to(torch.float64) - p, min=lowest))


def _work_dtype(out_dtype: torch.dtype) -> torch.dtype:
    return torch.float64 if out_dtype == torch.float64 else torch.float32


@dataclass
class _Stats:
    n: int
    sum_c: float
    sum_r: float
    sum_floor: float
    sum_o: float
    max_c: float
    max_r: float

    @property
    def rms_c(self) -> float:
        return math.sqrt(self.sum_c / max(self.n, 1))

    @property
    def rms_r(self) -> float:
        return math.sqrt(self.sum_r / max(self.n, 1))

    @property
    def rms_floor(self) -> float:
        return math.sqrt(self.sum_floor / max(self.n, 1))

    @property
    def rms_o(self) -> float:
        return math.sqrt(self.sum_o / max(self.n, 1))


def _parts(c: torch.Tensor, r: torch.Tensor, o: torch.Tensor, loose: torch.Tensor | None, dtype: torch.dtype):
    """One chunk widened: ``(finite, e_c, e_r, floor, o)``; ``e_r`` already the policy's (the
    larger of the reference's and the rounded operands' error), zero where not judged."""
    c, r, o = c.to(torch.complex128 if c.is_complex() else torch.float64), r.to(o.dtype), o
    r_fin = torch.isfinite(r)
    o = torch.where(torch.isfinite(o), o, r)  # where only the oracle is not finite, the reference stands in
    fin = r_fin & torch.isfinite(o)
    zero = torch.zeros((), dtype=torch.float64, device=o.device)
    e_c = torch.where(fin & torch.isfinite(c), (c - o).abs(), zero)
    e_r = torch.where(fin, (r - o).abs(), zero)
    if loose is not None:
        e_r = torch.maximum(e_r, torch.where(fin, (loose - o).abs(), zero))
    mag = torch.where(fin, o.abs(), zero)
    floor = A_OUT * ulp(mag, dtype) + A_WORK * ulp(mag, _work_dtype(dtype))
    return fin, e_c, e_r, floor, mag


def judge(out: torch.Tensor, ref: torch.Tensor, oracle: torch.Tensor, *, loose: torch.Tensor | None = None,
          sigma: torch.Tensor | None = None) -> Comparison:
    """The verdict on one float output (module docstring). ``out`` may live on another device than
    ``ref`` (it is moved chunk by chunk); ``loose``: the oracle on operands rounded to the policy's
    format (None: the ``reference`` policy); ``sigma``: the oracle's sensitivity, per element."""
    if out.shape != ref.shape:
        return Comparison(False, f"shape mismatch: got {tuple(out.shape)}, expected {tuple(ref.shape)}")
    if out.dtype != ref.dtype:
        return Comparison(False, f"dtype mismatch: got {out.dtype}, expected {ref.dtype}")
    n_all = ref.numel()
    if n_all == 0:
        return Comparison(True, "", 0.0, 0.0, 0.0)
    dev = ref.device
    cf, rf, of = out.detach().reshape(-1), ref.detach().reshape(-1), oracle.detach().reshape(-1)
    lf = loose.detach().reshape(-1) if loose is not None else None
    sf = sigma.detach().reshape(-1) if sigma is not None else None
    dtype = ref.dtype

    # -- pass 1: non-finite values, error norms ------------------------------------------------
    acc = torch.zeros(5, dtype=torch.float64, device=dev)  # sum e_c^2, e_r^2, floor^2, o^2, n
    mx = torch.zeros(2, dtype=torch.float64, device=dev)  # max e_c, max e_r
    bad_nf = torch.zeros(2, dtype=torch.int64, device=dev)  # output non-finite where ref finite; ref non-finite unmatched
    for s in range(0, n_all, CHUNK):
        c = cf[s:s + CHUNK].to(dev)
        r, o = rf[s:s + CHUNK], of[s:s + CHUNK]
        fin, e_c, e_r, floor, mag = _parts(c, r, o, lf[s:s + CHUNK] if lf is not None else None, dtype)
        cw = c.to(torch.float64) if not c.is_complex() else c
        bad_nf[0] += (fin & ~torch.isfinite(cw)).sum()
        r_nf = ~torch.isfinite(r)
        if bool(r_nf.any()):
            rw = r.to(torch.float64) if not r.is_complex() else r
            same = (torch.isnan(rw) & torch.isnan(cw)) | (rw == cw)
            bad_nf[1] += (r_nf & ~same & ~(torch.isfinite(o) & torch.isfinite(cw))).sum()
        acc += torch.stack([e_c.square().sum(), e_r.square().sum(), floor.square().sum(), mag.square().sum(),
                            fin.sum().to(torch.float64)])
        mx = torch.maximum(mx, torch.stack([e_c.max(), e_r.max()]))
    sums, maxima, nonfinite = acc.tolist(), mx.tolist(), bad_nf.tolist()
    st = _Stats(int(sums[4]), sums[0], sums[1], sums[2], sums[3], maxima[0], maxima[1])
    if nonfinite[0]:
        return Comparison(False, f"output has {nonfinite[0]} NaN/Inf value(s) where the reference is finite",
                          float("inf"), float("inf"), nonfinite[0] / n_all)
    if st.n == 0 and not nonfinite[1]:
        return Comparison(True, "", 0.0, 0.0, 0.0)
    e_scale = st.rms_r
    rms_o = st.rms_o or 1.0

    # -- pass 2: the element test, the reference's own flips, the worst element ----------------
    cnt = torch.zeros(3, dtype=torch.int64, device=dev)  # candidate out of bound, reference out of bound, nonfinite unmatched
    worst = torch.full((2,), -float("inf"), dtype=torch.float64, device=dev)  # max gap, its flat index
    over = torch.zeros((), dtype=torch.float64, device=dev)  # largest candidate error among its flips
    for s in range(0, n_all, CHUNK):
        c = cf[s:s + CHUNK].to(dev)
        r, o = rf[s:s + CHUNK], of[s:s + CHUNK]
        fin, e_c, e_r, floor, mag = _parts(c, r, o, lf[s:s + CHUNK] if lf is not None else None, dtype)
        base = K_ELEM * e_scale * (1.0 + mag / rms_o) + floor
        if sf is not None:
            base = base + K_SENS * sf[s:s + CHUNK].to(device=dev, dtype=torch.float64)
        bound = base + K_ELEM * e_r
        out_c = fin & (e_c > bound)
        cnt[0] += out_c.sum()
        cnt[1] += (fin & (e_r > base)).sum()
        r_nf = ~torch.isfinite(r)
        if bool(r_nf.any()):  # the reference overflowed: the candidate near a finite oracle is fine
            cw = c.to(torch.float64) if not c.is_complex() else c
            rw = r.to(torch.float64) if not r.is_complex() else r
            same = (torch.isnan(rw) & torch.isnan(cw)) | (rw == cw)
            near = torch.isfinite(o) & torch.isfinite(cw) & ((cw - o).abs() <= base)
            cnt[2] += (r_nf & ~same & ~near).sum()
        over = torch.maximum(over, torch.where(out_c, e_c, 0.0).max())
        gap = torch.where(fin, (e_c - bound) / torch.clamp(bound, min=1e-300), -float("inf"))
        k = torch.argmax(gap)
        worst = torch.where(gap[k] > worst[0], torch.stack([gap[k], (k + s).to(torch.float64)]), worst)
    counts, worst_l, over_l = cnt.tolist(), worst.tolist(), float(over)
    n_c, n_r, n_nf = counts
    idx = int(worst_l[1]) if math.isfinite(worst_l[1]) else 0
    flips_ok = n_c == 0 or (n_c <= F_FLIPS * n_r and over_l <= 2.0 * st.max_r)
    norm_ok = st.rms_c <= K_NORM * st.rms_r + st.rms_floor
    ok = norm_ok and flips_ok and n_nf == 0
    frac = n_c / max(st.n, 1)
    if ok:
        return Comparison(True, "", st.max_c, None, frac, precision=_summary(st, n_c, n_r, dtype, norm_ok))
    got, expected, eager = (_item(t, idx) for t in (cf, of, rf))
    if n_nf:
        msg = (f"{n_nf} element(s) where the reference is NaN/Inf are neither the same nor near the float64 "
               "value")
    elif not norm_ok:
        msg = (f"error too large for the task's precision: rms error {st.rms_c:.3g} against the float64 value, "
               f"{_ratio(st)} the reference's own ({st.rms_r:.3g}); {_cause(st, dtype)}")
    else:
        msg = (f"{n_c} of {st.n} elements far from the float64 value"
               + (f" (the reference itself has {n_r} such)" if n_r else " (the reference has none)")
               + "; a localised error (an edge tile, a row, a mask), not rounding")
    msg += f"; worst: got {got:.6g}, float64 value {expected:.6g}, reference {eager:.6g}"
    return Comparison(False, msg, st.max_c, None, frac, precision=_summary(st, n_c, n_r, dtype, norm_ok))


def _item(flat: torch.Tensor, idx: int) -> float:
    v = flat[idx]
    return float(v.abs() if v.is_complex() else v)


def _ratio(st: _Stats) -> str:
    if st.rms_r <= 0:
        return "where the reference is exact to the last bit, against"
    return f"{st.rms_c / st.rms_r:,.0f}x"


def _summary(st: _Stats, n_c: int, n_r: int, dtype: torch.dtype, norm_ok: bool) -> dict:
    """What the result records of a judged output (``details["precision"]``)."""
    u = st.rms_o * 2.0 ** (1 - _precision_bits(dtype)) if st.rms_o else 0.0
    return {"rms_err": st.rms_c, "reference_rms_err": st.rms_r, "max_err": st.max_c, "reference_max_err": st.max_r,
            "err_ulp": st.rms_c / u if u else None, "reference_err_ulp": st.rms_r / u if u else None,
            "flips": n_c, "reference_flips": n_r, "norm_ok": norm_ok}


def _cause(st: _Stats, dtype: torch.dtype) -> str:
    """What an error of this size usually is: named by its relative size against the output's rms."""
    rel = st.rms_c / st.rms_o if st.rms_o else float("inf")
    ulps = rel / 2.0 ** (1 - _precision_bits(dtype))
    size = f"~{ulps:,.0f} ulp of {str(dtype).replace('torch.', '')}"
    if rel >= 2.0 ** -6:
        return f"{size}: not a rounding difference, the computation differs (a term missing, a wrong formula)"
    if dtype in (torch.float32, torch.float64) and rel >= 2.0 ** -16:
        return (f"{size}: the size of TF32, fp16 or bf16 arithmetic (tl.dot on fp32 operands is TF32 by default: "
                "use input_precision=\"ieee\" or \"tf32x3\"; keep intermediates and accumulators in fp32)")
    if dtype in (torch.float16, torch.bfloat16) and rel >= 2.0 ** (1 - _precision_bits(dtype)) * 4:
        return (f"{size}: more than the task's dtype rounds: accumulate in fp32 (not in {dtype}), compute "
                "intermediates in fp32 and round once at the store")
    return f"{size}: more than the reference's rounding (accumulate in fp32, fewer low-precision steps)"


__all__ = ["A_OUT", "A_WORK", "F_FLIPS", "K_ELEM", "K_NORM", "K_SENS", "POLICIES", "Policy", "judge", "policy",
           "round_operand", "ulp"]
