"""Precision-aware correctness: a candidate's error against the float64 oracle, judged by the
reference's own error against it.

Notation, per output element ``i`` (all in float64): ``o`` the oracle (:mod:`drkernel.env.tasks.oracle`),
``r`` the reference in the task's dtypes, ``c`` the candidate, ``e_r = |r - o|``, ``e_c = |c - o|``;
``E_r = rms(e_r)``; ``ulp_out(o)`` the spacing of the output's dtype at ``|o|`` and ``ulp_32(o)``
float32's (the precision an honest kernel computes in; float64 for float64 outputs)::

    floor_i = A_OUT * ulp_out(o_i) + A_WORK * ulp_32(max(|o_i|, rms(o)))    what no kernel need beat
    s_i     = E_r * (1 + |o_i| / rms(o))                             the reference's error scale there

    R = rms(round_out(o) - o)                 the output dtype's own rounding (any kernel's least error)
    C = max(sqrt(E_r^2 - R^2) [, SIGMA_NORM * rms(sigma)])    the reference's error beyond it

    norm:     rms(e_c) <= hypot(ROUND_SLACK * R, K_NORM * C, NORM_WORK * rms(ulp_32(max(|o_i|, rms(o)))))
    element:  e_c_i    <= K_ELEM * (e_r_i + s_i) + floor_i [+ K_SENS * sigma_i]

The floor's second term judges no element finer than float32's resolution at the output's own scale:
an element far below ``rms(o)`` (a GELU's tail at -5, ~1e-6 in an output of rms ~50) is the small
difference of terms of the output's size in any fp32 formula, however exact the reference's own
library function is there.

Splitting off ``R`` matters where the output's dtype is coarse: a bf16 output rounds away TF32 or
bf16 arithmetic inside, and the reference's ``E_r`` is then mostly ``R``; what is left, ``C``, is
what the reference's computation adds, and a kernel may add a few times that, not a few times ``R``.

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
fp32-accurate kernel errs by the terms' rounding while the reference may, by chance, be exact there
(and a float64 reference is the oracle itself: its own error is 0). When a test fails, both are
repeated with the sensitivity added (``[...]`` above): ``sigma_i`` is how much the
oracle's element moves when every floating input is perturbed by a few float32 units in the last place
(:meth:`drkernel.env.tasks.prepared.PreparedTask.sensitivity`), the scale of an fp32 kernel's error there.
An element within its bound only by the sensitivity (a flip at a step: the oracle itself jumps
there) is left out of the norm in that second look: one such flip in a sampled output whose
reference happens to show none would otherwise fail the norm alone, which has no flips to compare
with (:data:`FLIP_REACH`).

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

from drkernel.env.judge.compare import CHUNK, Comparison, _fused, _fused_failed

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
K_SENS = 4.0
"""Multiple of the oracle's sensitivity (to a four-ulp float32 perturbation of the inputs,
:attr:`~drkernel.env.tasks.prepared.PreparedTask.SENSITIVITY_ULPS`: sixteen times its sensitivity to one
ulp) allowed at ill-conditioned elements; at an element next to a discontinuity the sensitivity is
the jump itself, so a flip there is allowed."""
F_FLIPS = 4.0
"""Elements out of the element bound allowed, as a multiple of the reference's own."""
ROUND_SLACK = 1.25
"""The error norm may exceed the output's own rounding (``R``, the rms error of the oracle rounded to
the output's dtype) by a quarter: every kernel rounds its result once at least, an honest one that
computes in fp32 errs ``~R`` (ties and last-bit differences add little), a bf16 output computed from
bf16 weights or with a bf16 accumulator errs 1.5-2.5 ``R``."""
NORM_WORK = 8.0
"""float32 units in the last place (at the output's scale) the error norm allows beside the
reference's own error, added in quadrature (independent errors): Triton's fast ``exp`` and
``rsqrt`` err 1-3 ulp where libm errs half of one, and a chunked fp32 scan 3-5 ulp where the CPU's
``torch.cumsum`` accumulates in double (0.2 ulp); 18-bit results (6 bits dropped) err ~18, a one-pass
variance on offset rows ~14 on an H200 (added linearly, as first written, the term let the latter
pass there: 4 C + 8 = 15 ulp)."""
SIGMA_NORM = 0.0625
"""In the norm test the reference's error is taken as at least this share of the oracle's rms
sensitivity (to a four-ulp perturbation: a quarter of a one-ulp one's): a reference that is exact (a
float64 task is its own oracle; an exact op) still has a scale for an honest kernel's rounding. Small,
since the sensitivity of a well-conditioned output is already about the reference's error (a larger
share paid one-pass variances at 6x)."""


@dataclass(frozen=True)
class Policy:
    """How a float output is judged. ``rule``: ``oracle`` (this module), ``allclose`` (``|c - r| <=
    atol + rtol * |r|`` against the reference, KernelBench's test) or ``rms`` (the scale-aware
    tolerance ``|c - r| <= atol * rms(r) + rtol * |r|``, :func:`~drkernel.env.judge.compare.compare_outputs`).
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
    ``m`` in [0.5, 1), ``p`` the precision in bits; the subnormal spacing below the normal range
    (:func:`_format`)."""
    p, lowest = _format(dtype)
    _, e = torch.frexp(mag)
    e = torch.where(mag > 0, e, -1022)  # (frexp(0) has exponent 0: the spacing at 0 is the lowest)
    return torch.exp2(torch.clamp(e.to(torch.float64) - p, min=lowest))


def rounding_error(mag: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """``|round(mag) - mag|`` for ``mag`` >= 0 (float64) rounded to nearest even at ``dtype``'s
    precision (:func:`ulp`; range ignored; 0 for float64): ``y = mag / ulp`` is exact, and
    ``(y + 2^52) - 2^52`` rounds it to an integer in float64's own arithmetic, as the kernel does."""
    if _precision_bits(dtype) >= 53:
        return torch.zeros_like(mag)
    u = ulp(mag, dtype)
    y = mag / u
    return ((y + 2.0 ** 52) - 2.0 ** 52 - y).abs() * u


def _work_dtype(out_dtype: torch.dtype) -> torch.dtype:
    return torch.float64 if out_dtype == torch.float64 else torch.float32


@dataclass
class _Stats:
    n: int
    sum_c: float
    sum_r: float
    sum_work: float
    sum_o: float
    max_c: float
    max_r: float
    sum_round: float = 0.0
    """sum of ``(round_out(o) - o)^2``: the error of the oracle rounded to the output's dtype."""

    @property
    def rms_c(self) -> float:
        return math.sqrt(self.sum_c / max(self.n, 1))

    @property
    def rms_r(self) -> float:
        return math.sqrt(self.sum_r / max(self.n, 1))

    @property
    def rms_work(self) -> float:
        return math.sqrt(self.sum_work / max(self.n, 1))

    @property
    def rms_round(self) -> float:
        return math.sqrt(self.sum_round / max(self.n, 1))

    @property
    def rms_o(self) -> float:
        return math.sqrt(self.sum_o / max(self.n, 1))


def _parts(c: torch.Tensor, r: torch.Tensor, o: torch.Tensor, loose: torch.Tensor | None, dtype: torch.dtype,
           rms_o: float = 0.0):
    """One chunk widened: ``(finite, e_c, e_r, floor, |o|, work)`` (``work``: float32's ulp at
    ``max(|o|, rms_o)``); ``e_r`` already the policy's (the
    larger of the reference's and the rounded operands' error), zero where not judged; ``floor``
    needs the output's ``rms_o`` (pass 1 computes it with floor unused)."""
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
    fmag = torch.where(torch.isfinite(o), o.abs(), zero)  # (also where the reference overflowed)
    work = ulp(torch.clamp(fmag, min=rms_o), _work_dtype(dtype))
    floor = A_OUT * ulp(fmag, dtype) + A_WORK * work
    return fin, e_c, e_r, floor, mag, work


def judge(out: torch.Tensor, ref: torch.Tensor, oracle: torch.Tensor, *, loose: torch.Tensor | None = None,
          sigma: torch.Tensor | None = None) -> Comparison:
    """The verdict on one float output (module docstring). ``out`` may live on another device than
    ``ref`` (it is moved there); ``loose``: the oracle on operands rounded to the policy's format
    (None: the ``reference`` policy); ``sigma``: the oracle's sensitivity, per element. On a GPU the
    two passes are Triton kernels (:mod:`drkernel.env.judge.precision_kernels`), elsewhere torch
    operations in chunks of ``CHUNK`` elements (also, from then on, wherever the kernels failed to
    compile or run: ``compare.FUSED``); both read the results back once per pass."""
    if out.shape != ref.shape:
        return Comparison(False, f"shape mismatch: got {tuple(out.shape)}, expected {tuple(ref.shape)}")
    if out.dtype != ref.dtype:
        return Comparison(False, f"dtype mismatch: got {out.dtype}, expected {ref.dtype}")
    n_all = ref.numel()
    if n_all == 0:
        return Comparison(True, "", 0.0, 0.0, 0.0)
    dev = ref.device
    flat = [None if t is None else t.detach().reshape(-1).to(dev) for t in (out, ref, oracle, loose, sigma)]
    cf, rf, of, lf, sf = flat
    dtype = ref.dtype
    fused = _fused(*[t for t in flat if t is not None])
    if fused:
        from drkernel.env.judge import precision_kernels

        cf, rf, of = cf.contiguous(), rf.contiguous(), of.contiguous()
        lf = lf.contiguous() if lf is not None else None
        try:
            sums, ints = precision_kernels.first_pass(cf, rf, of, lf, *_format(dtype))
        except Exception as exc:  # noqa: BLE001 - see compare._fused_failed (out of memory re-raised)
            _fused_failed(exc)
            fused = False
    if not fused:
        sums, ints = _first_pass(cf, rf, of, lf, dtype)
    st = _Stats(int(ints[0]), sums[0], sums[1], 0.0, sums[2], sums[3], sums[4], sums[5])
    if ints[1]:
        return Comparison(False, f"output has {ints[1]} NaN/Inf value(s) where the reference is finite",
                          float("inf"), float("inf"), ints[1] / n_all)
    if st.n == 0 and not ints[2]:
        return Comparison(True, "", 0.0, 0.0, 0.0)
    e_scale, rms_o = st.rms_r, st.rms_o or 1.0
    p_out, low_out = _format(dtype)
    p_work, low_work = _format(_work_dtype(dtype))
    if fused:
        try:
            st.sum_work, over, n_c, n_r, n_nf, _, idx, sum_sigma, sum_jumps = precision_kernels.second_pass(
                cf, rf, of, lf, sf, [e_scale, rms_o, K_ELEM, A_OUT, A_WORK, K_SENS], p_out, low_out, p_work,
                low_work)
        except Exception as exc:  # noqa: BLE001 - as above
            _fused_failed(exc)
            fused = False
    if not fused:
        st.sum_work, over, n_c, n_r, n_nf, _, idx, sum_sigma, sum_jumps = _second_pass(cf, rf, of, lf, sf, dtype, e_scale,
                                                                                      rms_o)
    flips_ok = n_c == 0 or (n_c <= F_FLIPS * n_r and over <= 2.0 * st.max_r)
    rounding = st.rms_round  # what the output's dtype costs any kernel, the correctly rounded one
    compute = max(math.sqrt(max(st.rms_r ** 2 - rounding ** 2, 0.0)),
                  SIGMA_NORM * math.sqrt(sum_sigma / max(st.n, 1)))  # the reference's error beyond it
    norm_bound = math.hypot(ROUND_SLACK * rounding, K_NORM * compute, NORM_WORK * st.rms_work)
    # elements within their bound only by the oracle's jump there (a flip at a step) leave the norm
    rms_norm = math.sqrt(max(st.sum_c - sum_jumps, 0.0) / max(st.n, 1)) if sum_jumps else st.rms_c
    norm_ok = rms_norm <= norm_bound
    ok = norm_ok and flips_ok and n_nf == 0
    frac = n_c / max(st.n, 1)
    summary = {**_summary(st, n_c, n_r, dtype, norm_ok), "norm_bound": norm_bound}
    if ok:
        return Comparison(True, "", st.max_c, None, frac, precision=summary)
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
    return Comparison(False, msg, st.max_c, None, frac, precision=summary)


SENSITIVITY_REACH = 64.0
"""A failed norm test is looked at again with the oracle's sensitivity only when the error is within
this factor of its bound (:func:`near_miss`): the sensitivity costs eight float64 forwards, and an error
2^13x the reference's (TF32) or a wrong formula cannot be a rounding of ill-conditioned terms; most
kernels an RL policy writes fail, so the forwards would run for nearly every one of them."""


FLIP_REACH = 1e-3
"""A failed comparison whose error sits in at most this share of the elements (and at least
:data:`FLIP_REACH_MIN` of them) is looked at again with the sensitivity, however large its norm: a
handful of elements one step away is what an output with jumps (a quantiser's ``round``, ``rint``)
shows where an input lies within an ulp of a step, and one such flip in a sampled timed output
whose reference happens to have none lifts the norm far past its bound (the reference's error is 0
there). The second look passes only where the oracle itself jumps under a few-ulp perturbation of
the inputs, so a wrong element on a smooth output still fails."""
FLIP_REACH_MIN = 16


def near_miss(cmp: Comparison) -> bool:
    """Whether a failed oracle comparison may pass with the sensitivity (:func:`judge`'s ``sigma``):
    its element test alone failed, its error norm is within :data:`SENSITIVITY_REACH` of the bound,
    or its error sits in a few elements (:data:`FLIP_REACH`)."""
    p = cmp.precision
    if not p:
        return False  # a shape, dtype or NaN failure
    if p.get("norm_ok") or p.get("rms_err", float("inf")) <= SENSITIVITY_REACH * p.get("norm_bound", 0.0):
        return True
    flips, n = p.get("flips", 0), p.get("elements", 0)
    return 0 < flips <= max(FLIP_REACH_MIN, FLIP_REACH * n)


def _format(dtype: torch.dtype) -> tuple[int, int]:
    """``(p, lowest)``: precision in bits and the exponent of the subnormal spacing (at least
    -1022, float64's smallest normal: what the kernels can represent)."""
    p = _precision_bits(dtype)
    fi = torch.finfo(dtype if dtype in (torch.float16, torch.bfloat16, torch.float32, torch.float64) else torch.float32)
    return p, max(int(math.log2(fi.smallest_normal)) + 1 - p, -1022)


def _first_pass(cf, rf, of, lf, dtype) -> tuple[list[float], list[int]]:
    """The torch path of :func:`drkernel.env.judge.precision_kernels.first_pass`."""
    dev = rf.device
    acc = torch.zeros(4, dtype=torch.float64, device=dev)  # sum e_c^2, e_r^2, o^2, e_round^2
    mx = torch.zeros(2, dtype=torch.float64, device=dev)  # max e_c, max e_r
    cnt = torch.zeros(4, dtype=torch.int64, device=dev)
    for s in range(0, rf.numel(), CHUNK):
        c, r, o = cf[s:s + CHUNK], rf[s:s + CHUNK], of[s:s + CHUNK]
        fin, e_c, e_r, _, mag, _ = _parts(c, r, o, lf[s:s + CHUNK] if lf is not None else None, dtype)
        cw, rw = _widen(c), _widen(r)
        r_nf = ~torch.isfinite(rw)
        same = (torch.isnan(rw) & torch.isnan(cw)) | (rw == cw)
        cnt += torch.stack([fin.sum(), (fin & ~torch.isfinite(cw)).sum(),
                            (r_nf & ~same & ~(torch.isfinite(o) & torch.isfinite(cw))).sum(), r_nf.sum()])
        e_round = torch.where(fin, rounding_error(mag, dtype), 0.0)
        acc += torch.stack([e_c.square().sum(), e_r.square().sum(), mag.square().sum(), e_round.square().sum()])
        mx = torch.maximum(mx, torch.stack([e_c.max(), e_r.max()]))
    return torch.cat([acc[:3], mx, acc[3:]]).tolist(), cnt.tolist()


def _second_pass(cf, rf, of, lf, sf, dtype, e_scale, rms_o) -> tuple[float, float, int, int, int, float, int, float,
                                                                       float]:
    """The torch path of :func:`drkernel.env.judge.precision_kernels.second_pass`."""
    dev = rf.device
    cnt = torch.zeros(3, dtype=torch.int64, device=dev)  # candidate out of bound, reference out of bound, nonfinite unmatched
    fl = torch.zeros(4, dtype=torch.float64, device=dev)  # sum work^2, max e_c among the candidate's flips, sum sigma^2,
    #                                                      sum e_c^2 within the bound only by the sensitivity
    worst = torch.full((2,), -float("inf"), dtype=torch.float64, device=dev)  # max gap, its flat index
    for s in range(0, rf.numel(), CHUNK):
        c, r, o = cf[s:s + CHUNK], rf[s:s + CHUNK], of[s:s + CHUNK]
        fin, e_c, e_r, floor, mag, work = _parts(c, r, o, lf[s:s + CHUNK] if lf is not None else None, dtype, rms_o)
        base = K_ELEM * e_scale * (1.0 + mag / rms_o) + floor
        out_plain = fin & (e_c > base + K_ELEM * e_r)
        if sf is not None:
            sig = torch.where(fin, sf[s:s + CHUNK].to(torch.float64), 0.0)
            base = base + K_SENS * sig
            fl[2] += sig.square().sum()
        bound = base + K_ELEM * e_r
        out_c = fin & (e_c > bound)
        fl[3] += torch.where(out_plain & ~out_c, e_c, 0.0).square().sum()
        cw, rw = _widen(c), _widen(r)
        same = (torch.isnan(rw) & torch.isnan(cw)) | (rw == cw)
        near = torch.isfinite(o) & torch.isfinite(cw) & ((cw - o).abs() <= base)
        cnt += torch.stack([out_c.sum(), (fin & (e_r > base)).sum(), (~torch.isfinite(rw) & ~same & ~near).sum()])
        fl[0] += torch.where(fin, work, 0.0).square().sum()
        fl[1] = torch.maximum(fl[1], torch.where(out_c, e_c, 0.0).max())
        gap = torch.where(fin, (e_c - bound) / torch.clamp(bound, min=1e-300), -float("inf"))
        k = torch.argmax(gap)
        worst = torch.where(gap[k] > worst[0], torch.stack([gap[k], (k + s).to(torch.float64)]), worst)
    f, w, counts = fl.tolist(), worst.tolist(), cnt.tolist()
    return f[0], f[1], counts[0], counts[1], counts[2], w[0], int(w[1]) if math.isfinite(w[1]) else 0, f[2], f[3]


def _widen(t: torch.Tensor) -> torch.Tensor:
    return t if t.is_complex() else t.to(torch.float64)


def _item(flat: torch.Tensor, idx: int) -> float:
    v = flat[idx]
    return float(v.abs() if v.is_complex() else v)


def _ratio(st: _Stats) -> str:
    if st.rms_r <= 0:
        return "where the reference is exact to the last bit, against"
    return f"{_approx(st.rms_c / st.rms_r)}x"


def _summary(st: _Stats, n_c: int, n_r: int, dtype: torch.dtype, norm_ok: bool) -> dict:
    """What the result records of a judged output (``details["precision"]``)."""
    u = st.rms_o * 2.0 ** (1 - _precision_bits(dtype)) if st.rms_o else 0.0
    return {"rms_err": st.rms_c, "reference_rms_err": st.rms_r, "max_err": st.max_c, "reference_max_err": st.max_r,
            "err_ulp": st.rms_c / u if u else None, "reference_err_ulp": st.rms_r / u if u else None,
            "rounding_err": st.rms_round, "flips": n_c, "reference_flips": n_r, "norm_ok": norm_ok, "elements": st.n}


def _approx(x: float) -> str:
    """Two significant digits (a message must not depend on a sum's last bits): 4,100; 2.3e+14."""
    if not math.isfinite(x) or x >= 1e6:
        return f"{x:.2g}"
    return f"{float(f'{x:.2g}'):,.0f}" if x >= 10 else f"{x:.2g}"


def _cause(st: _Stats, dtype: torch.dtype) -> str:
    """What an error of this size usually is: named by its relative size against the output's rms."""
    rel = st.rms_c / st.rms_o if st.rms_o else float("inf")
    ulps = rel / 2.0 ** (1 - _precision_bits(dtype))
    size = f"~{_approx(ulps)} ulp of {str(dtype).replace('torch.', '')}"
    if rel >= 2.0 ** -6:
        return f"{size}: not a rounding difference, the computation differs (a term missing, a wrong formula)"
    if dtype in (torch.float32, torch.float64) and rel >= 2.0 ** -16:
        return (f"{size}: the size of TF32, fp16 or bf16 arithmetic (tl.dot on fp32 operands is TF32 by default: "
                "use input_precision=\"ieee\" or \"tf32x3\"; keep intermediates and accumulators in fp32)")
    if dtype in (torch.float16, torch.bfloat16) and rel >= 2.0 ** (1 - _precision_bits(dtype)) * 4:
        return (f"{size}: more than the task's dtype rounds: accumulate in fp32 (not in {dtype}), compute "
                "intermediates in fp32 and round once at the store")
    return f"{size}: more than the reference's rounding (accumulate in fp32, fewer low-precision steps)"


__all__ = ["A_OUT", "A_WORK", "F_FLIPS", "FLIP_REACH", "K_ELEM", "K_NORM", "K_SENS", "NORM_WORK", "POLICIES", "ROUND_SLACK", "SENSITIVITY_REACH",
           "SIGMA_NORM", "Policy", "judge", "near_miss", "policy",
           "round_operand", "ulp"]
