"""The comparison of :mod:`drkernel.env.judge.compare` as two Triton kernels, for outputs on a GPU.

Each comparison used to be some thirty torch operations per chunk of 16M elements (widening,
``isfinite``, differences, bounds, sums, maxima), ~20 GB of device traffic for a 64M-element fp32
output, plus the reference's root-mean-square (another pass of seven operations per chunk). With
eight evaluations in flight each of those kernels waited for the grader's turn on a GPU time-sliced
between the workers' contexts, and each operation took the grader's GIL to dispatch: comparisons
were the grader's largest CPU item and ~0.6 s of an evaluation (docs/results/h100-2026-11-26f.md,
py-spy). Here one pass reads the output and the reference once (and the allowance when there is
one) and writes per-block partial results; torch sums and maximises the few thousand partials.

Same arithmetic as the torch path, element by element, in float64::

    rf  = r - r == 0                                  (a finite reference element: isfinite)
    both = rf and o - o == 0
    err = |o - r| where both, else 0
    bound = atol_rms + rtol * |r| (+ allowance)       (no fused multiply-add: as torch's separate ops)
    bad = both and err > bound
    rel = err / max(|r|, floor) where both, else 0

``sum(r^2)`` over finite elements is summed in another order than torch's (per block, then the
blocks): the scale ``rms(ref)`` may differ from the torch path's in its last bits; every count and
maximum is otherwise the same (``tests/env/test_compare.py``, ``tests/gpu``), but for the largest
relative error when a float64 reference's ``rms`` overflows to infinity (torch's is NaN, this 0; the
verdict is the same). Scalars travel as device tensors (a Python float argument would reach the
kernel as fp32). Should the kernels fail to compile or run, the grader compares with torch from then
on (``compare._fused_failed``).
"""

from __future__ import annotations

from typing import Any

BLOCK = 2048
"""Elements per program (one partial result each)."""
DTYPES = ("float16", "bfloat16", "float32", "float64")
"""Output dtypes the kernels read (widened to float64 in registers)."""

_kernels: dict[str, Any] = {}


def _build() -> dict[str, Any]:
    """Define the kernels at first use (Triton is imported only by a grader comparing GPU outputs)."""
    if _kernels:
        return _kernels
    import triton
    import triton.language as tl

    @triton.jit(do_not_specialize=["n"])  # (one compiled variant whatever the output's size)
    def rms_partials(r_ptr, n, sq_ptr, cnt_ptr, BLOCK: tl.constexpr):
        pid = tl.program_id(0)
        offs = pid.to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
        m = offs < n
        r = tl.load(r_ptr + offs, mask=m, other=0.0).to(tl.float64)
        fin = m & (r - r == 0.0)  # finite: inf - inf and NaN - NaN are NaN
        tl.store(sq_ptr + pid, tl.sum(tl.where(fin, r * r, 0.0), axis=0))
        tl.store(cnt_ptr + pid, tl.sum(fin.to(tl.int64), axis=0))

    @triton.jit(do_not_specialize=["n", "P"])
    def stats_partials(o_ptr, r_ptr, a_ptr, coef_ptr, n, cnt_ptr, max_ptr, P,
                       HAS_A: tl.constexpr, BLOCK: tl.constexpr):
        pid = tl.program_id(0)
        offs = pid.to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
        m = offs < n
        atol_rms = tl.load(coef_ptr)
        rtol = tl.load(coef_ptr + 1)
        floor = tl.load(coef_ptr + 2)
        o = tl.load(o_ptr + offs, mask=m, other=0.0).to(tl.float64)
        r = tl.load(r_ptr + offs, mask=m, other=0.0).to(tl.float64)
        ar = tl.abs(r)
        rf = m & (r - r == 0.0)
        both = rf & (o - o == 0.0)
        err = tl.where(both, tl.abs(o - r), 0.0)
        bound = atol_rms + rtol * ar
        if HAS_A:
            bound = bound + tl.load(a_ptr + offs, mask=m, other=0.0)
        bad = both & (err > bound)
        rel = tl.where(both, err / tl.maximum(ar, floor), 0.0)
        tl.store(cnt_ptr + pid, tl.sum((m & ~rf).to(tl.int64), axis=0))
        tl.store(cnt_ptr + P + pid, tl.sum((rf & ~both).to(tl.int64), axis=0))
        tl.store(cnt_ptr + 2 * P + pid, tl.sum(bad.to(tl.int64), axis=0))
        tl.store(max_ptr + pid, tl.max(err, axis=0))
        tl.store(max_ptr + P + pid, tl.max(rel, axis=0))

    _kernels.update(rms=rms_partials, stats=stats_partials, cdiv=triton.cdiv)
    return _kernels


def _on(device: Any) -> Any:
    """The device's context for a launch (Triton launches on the current device); none for CPU
    tensors (Triton's interpreter, ``TRITON_INTERPRET=1``: the CPU tests of these kernels)."""
    import contextlib

    import torch

    return torch.cuda.device(device) if device.type == "cuda" else contextlib.nullcontext()


def applies(*tensors: Any) -> bool:
    """Whether the kernels compare these tensors (flat; made contiguous by the caller): all on one
    GPU, float dtypes (complex and integer outputs, and any tensor on the CPU, take the torch path)."""
    first = tensors[0]
    return (first.is_cuda and all(t.device == first.device for t in tensors)
            and all(str(t.dtype).removeprefix("torch.") in DTYPES for t in tensors))


def rms_parts(rf: Any) -> tuple[Any, Any]:
    """``(rms, n_finite)`` of a flat contiguous reference on a GPU, as device scalars (float64,
    int64): :func:`drkernel.env.judge.compare._rms_parts` in one pass."""
    import torch

    k = _build()
    n = rf.numel()
    p = k["cdiv"](n, BLOCK)
    sq = torch.empty(p, dtype=torch.float64, device=rf.device)
    cnt = torch.empty(p, dtype=torch.int64, device=rf.device)
    with _on(rf.device):
        k["rms"][(p,)](rf, n, sq, cnt, BLOCK=BLOCK, num_warps=8)
    n_finite = cnt.sum()
    return (sq.sum() / n_finite.clamp_min(1)).sqrt(), n_finite


def stats(of: Any, rf: Any, af: Any, rms_t: Any, atol: float, rtol: float) -> tuple[Any, Any]:
    """``(counts, maxima)`` as the torch path's loop leaves them: counts (int64: reference
    non-finite, output non-finite where the reference is finite, out of tolerance) and maxima
    (float64: largest absolute error, largest relative error), on the device."""
    import torch

    k = _build()
    n, dev = rf.numel(), rf.device
    p = k["cdiv"](n, BLOCK)
    floor = torch.where(rms_t > 0, rms_t * 1e-6, torch.full_like(rms_t, 1e-30))
    # atol * rms and rtol as the torch path has them: float64 (a Python float argument would be fp32)
    coef = torch.stack([rms_t * atol, torch.full_like(rms_t, rtol), floor])
    cnt = torch.empty(3 * p, dtype=torch.int64, device=dev)
    mx = torch.empty(2 * p, dtype=torch.float64, device=dev)
    a = af.to(device=dev, dtype=torch.float64).contiguous() if af is not None else coef  # (unread without HAS_A)
    with _on(dev):
        k["stats"][(p,)](of, rf, a, coef, n, cnt, mx, p, HAS_A=af is not None, BLOCK=BLOCK, num_warps=8,
                         enable_fp_fusion=False)
    return cnt.view(3, p).sum(dim=1), mx.view(2, p).amax(dim=1)


__all__ = ["applies", "rms_parts", "stats", "BLOCK", "DTYPES"]
