"""The Triton kernels of :mod:`drkernel.env.judge.precision_kernels` (imported only when a grader judges
an output on a GPU, or a test runs them through the interpreter: Triton loads lazily)."""

import triton
import triton.language as tl


@triton.jit
def _load(c_ptr, r_ptr, o_ptr, l_ptr, offs, m, HAS_L: tl.constexpr):
    """``(fin, cfin, rfin, c, r, o, e_c, e_r, mag)`` of one block (precision._parts)."""
    c = tl.load(c_ptr + offs, mask=m, other=0.0).to(tl.float64)
    r = tl.load(r_ptr + offs, mask=m, other=0.0).to(tl.float64)
    o_raw = tl.load(o_ptr + offs, mask=m, other=0.0)
    rfin = m & (r - r == 0.0)
    ofin = o_raw - o_raw == 0.0
    o = tl.where(ofin, o_raw, r)
    fin = rfin & (o - o == 0.0)
    cfin = c - c == 0.0
    e_c = tl.where(fin & cfin, tl.abs(c - o), 0.0)
    e_r = tl.where(fin, tl.abs(r - o), 0.0)
    if HAS_L:
        lo = tl.load(l_ptr + offs, mask=m, other=0.0)
        e_r = tl.maximum(e_r, tl.where(fin, tl.abs(lo - o), 0.0))
    mag = tl.where(fin, tl.abs(o), 0.0)
    return fin, cfin, rfin, ofin, c, r, o_raw, e_c, e_r, mag

@triton.jit
def _ulp(mag, P: tl.constexpr, LOWEST: tl.constexpr):
    e = ((mag.to(tl.int64, bitcast=True) >> 52) & 0x7FF) - 1022  # frexp's exponent (normal mag)
    k = tl.maximum(e - P, LOWEST)
    return (((k + 1023) & 0x7FF) << 52).to(tl.float64, bitcast=True)

@triton.jit(do_not_specialize=["n", "NP"])
def pass1(c_ptr, r_ptr, o_ptr, l_ptr, n, f_ptr, i_ptr, NP, HAS_L: tl.constexpr, P_OUT: tl.constexpr,
          LOW_OUT: tl.constexpr, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    offs = pid.to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    fin, cfin, rfin, ofin, c, r, o_raw, e_c, e_r, mag = _load(c_ptr, r_ptr, o_ptr, l_ptr, offs, m, HAS_L)
    tl.store(f_ptr + pid, tl.sum(e_c * e_c, axis=0))
    tl.store(f_ptr + NP + pid, tl.sum(e_r * e_r, axis=0))
    tl.store(f_ptr + 2 * NP + pid, tl.sum(mag * mag, axis=0))
    tl.store(f_ptr + 3 * NP + pid, tl.max(e_c, axis=0))
    tl.store(f_ptr + 4 * NP + pid, tl.max(e_r, axis=0))
    e_round = tl.zeros_like(e_c)
    if P_OUT < 53:  # the oracle rounded to the output's precision (to nearest even; precision.rounded)
        u = _ulp(mag, P_OUT, LOW_OUT)
        y = mag / u
        e_round = tl.where(fin, tl.abs((y + 4503599627370496.0) - 4503599627370496.0 - y) * u, 0.0)
    tl.store(f_ptr + 5 * NP + pid, tl.sum(e_round * e_round, axis=0))
    tl.store(i_ptr + pid, tl.sum(fin.to(tl.int64), axis=0))
    tl.store(i_ptr + NP + pid, tl.sum((fin & ~cfin).to(tl.int64), axis=0))
    same = ((r != r) & (c != c)) | (r == c)
    tl.store(i_ptr + 2 * NP + pid, tl.sum((m & ~rfin & ~same & ~(ofin & cfin)).to(tl.int64), axis=0))
    tl.store(i_ptr + 3 * NP + pid, tl.sum((m & ~rfin).to(tl.int64), axis=0))

@triton.jit(do_not_specialize=["n", "NP"])
def pass2(c_ptr, r_ptr, o_ptr, l_ptr, s_ptr, coef_ptr, n, f_ptr, i_ptr, NP,
          HAS_L: tl.constexpr, HAS_S: tl.constexpr, P_OUT: tl.constexpr, LOW_OUT: tl.constexpr,
          P_WORK: tl.constexpr, LOW_WORK: tl.constexpr, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    offs = pid.to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    fin, cfin, rfin, ofin, c, r, o_raw, e_c, e_r, mag = _load(c_ptr, r_ptr, o_ptr, l_ptr, offs, m, HAS_L)
    e_scale = tl.load(coef_ptr)
    rms_o = tl.load(coef_ptr + 1)
    k_elem = tl.load(coef_ptr + 2)
    a_out = tl.load(coef_ptr + 3)
    a_work = tl.load(coef_ptr + 4)
    k_sens = tl.load(coef_ptr + 5)
    o = tl.where(ofin, o_raw, r)
    fmag = tl.where(o - o == 0.0, tl.abs(o), 0.0)  # (also where the reference overflowed)
    work = _ulp(tl.maximum(fmag, rms_o), P_WORK, LOW_WORK)
    floor = a_out * _ulp(fmag, P_OUT, LOW_OUT) + a_work * work
    base = k_elem * e_scale * (1.0 + mag / rms_o) + floor
    out_plain = fin & (e_c > base + k_elem * e_r)  # out of the bound without the sensitivity
    sig = tl.zeros_like(base)
    if HAS_S:
        sig = tl.where(fin, tl.load(s_ptr + offs, mask=m, other=0.0), 0.0)
        base = base + k_sens * sig
    bound = base + k_elem * e_r
    out_c = fin & (e_c > bound)
    excused = tl.where(out_plain & ~out_c, e_c, 0.0)  # within the bound only by the oracle's jump there
    tl.store(f_ptr + 4 * NP + pid, tl.sum(excused * excused, axis=0))
    fz = tl.where(fin, work, 0.0)
    tl.store(f_ptr + pid, tl.sum(fz * fz, axis=0))
    tl.store(f_ptr + NP + pid, tl.max(tl.where(out_c, e_c, 0.0), axis=0))
    gap = tl.where(fin, (e_c - bound) / tl.maximum(bound, 1e-300), -float("inf"))
    g = tl.max(gap, axis=0)
    tl.store(f_ptr + 2 * NP + pid, g)
    tl.store(i_ptr + pid, tl.sum(out_c.to(tl.int64), axis=0))
    tl.store(i_ptr + NP + pid, tl.sum((fin & (e_r > base)).to(tl.int64), axis=0))
    same = ((r != r) & (c != c)) | (r == c)
    near = ofin & cfin & (tl.abs(c - o) <= base)
    tl.store(i_ptr + 2 * NP + pid, tl.sum((m & ~rfin & ~same & ~near).to(tl.int64), axis=0))
    first = tl.min(tl.where(gap == g, offs, n), axis=0)  # the first element at the block's largest gap
    tl.store(i_ptr + 3 * NP + pid, first)
    tl.store(f_ptr + 3 * NP + pid, tl.sum(sig * sig, axis=0))

