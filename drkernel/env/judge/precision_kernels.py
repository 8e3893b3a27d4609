"""The two passes of :func:`drkernel.env.judge.precision.judge` as Triton kernels, for outputs on a GPU.

The torch path is some forty elementwise operations per pass and chunk (widening, ``isfinite``,
differences, ``frexp``/``exp2`` for the units in the last place, bounds, sums, maxima): ~30 ms for
a 64M-element output on an H200, against ~1 ms for one pass that reads the candidate, the
reference and the oracle once and writes per-block partials, which torch then reduces (as
:mod:`drkernel.env.judge.compare_kernels` does for the scale-aware comparison).

Element by element the arithmetic is the torch path's, in float64; ``ulp`` is read from the
float64 exponent bits (``2^(e - p)`` for ``|o| = m 2^e``, ``m`` in [0.5, 1)), clamped below at the
format's subnormal spacing (float64's own below 2^-1022). Sums are taken in another order than
torch's (per block, then the blocks): norms may differ in their last bits, counts and maxima do not
(``tests/env/test_precision.py`` runs both paths on the interpreter; ``tests/gpu`` on a GPU).
"""

from __future__ import annotations

from typing import Any

from drkernel.env.judge.compare_kernels import _on

BLOCK = 1024
"""Which outputs take these kernels, and the switch that turns them off, are
:mod:`drkernel.env.judge.compare_kernels`' (``applies``, ``compare.FUSED``): one path for both comparisons."""


def _build() -> Any:
    """The kernels' module, imported at first use."""
    from drkernel.env.judge import precision_triton

    return precision_triton


def first_pass(cf: Any, rf: Any, of: Any, lf: Any, p_out: int, low_out: int) -> tuple[list[float], list[int]]:
    """``([sum e_c^2, sum e_r^2, sum o^2, max e_c, max e_r, sum e_round^2], [n judged, output non-finite where judged,
    reference non-finite unmatched (first pass), reference non-finite])`` of flat contiguous tensors."""
    import torch

    k = _build()
    n, dev = rf.numel(), rf.device
    p = k.triton.cdiv(n, BLOCK)
    f = torch.empty(6 * p, dtype=torch.float64, device=dev)
    i = torch.empty(4 * p, dtype=torch.int64, device=dev)
    with _on(dev):
        k.pass1[(p,)](cf, rf, of, lf if lf is not None else of, n, f, i, p, HAS_L=lf is not None,
                      P_OUT=p_out, LOW_OUT=max(low_out, -1022), BLOCK=BLOCK, num_warps=4, enable_fp_fusion=False)
    f = f.view(6, p)
    fl = torch.cat([f[:3].sum(dim=1), f[3:5].amax(dim=1), f[5:].sum(dim=1)]).tolist()
    return fl, i.view(4, p).sum(dim=1).tolist()


def second_pass(cf: Any, rf: Any, of: Any, lf: Any, sf: Any, coef: list[float], p_out: int, low_out: int,
                p_work: int, low_work: int) -> tuple[float, float, int, int, int, float, int, float, float]:
    """``(sum work^2 (float32's ulp at max(|o|, rms o)), max e_c among the candidate's flips, flips, reference flips, non-finite
    unmatched, worst gap, its flat index, sum sigma^2, sum e_c^2 of the elements within the bound only by
    the sensitivity)``; ``coef``: ``[e_scale, rms_o, K_ELEM, A_OUT, A_WORK, K_SENS]``."""
    import torch

    k = _build()
    n, dev = rf.numel(), rf.device
    p = k.triton.cdiv(n, BLOCK)
    f = torch.empty(5 * p, dtype=torch.float64, device=dev)
    i = torch.empty(4 * p, dtype=torch.int64, device=dev)
    ct = torch.tensor(coef, dtype=torch.float64, device=dev)
    s = sf.to(device=dev, dtype=torch.float64).contiguous() if sf is not None else ct
    with _on(dev):
        k.pass2[(p,)](cf, rf, of, lf if lf is not None else of, s, ct, n, f, i, p, HAS_L=lf is not None,
                         HAS_S=sf is not None, P_OUT=p_out, LOW_OUT=max(low_out, -1022), P_WORK=p_work,
                         LOW_WORK=max(low_work, -1022), BLOCK=BLOCK, num_warps=4, enable_fp_fusion=False)
    f, i = f.view(5, p), i.view(4, p)
    b = int(torch.argmax(f[2]))
    head = torch.stack([f[0].sum(), f[1].amax(), f[2][b], f[3].sum(), f[4].sum()]).tolist()
    counts = i[:3].sum(dim=1).tolist()
    return head[0], head[1], counts[0], counts[1], counts[2], head[2], int(i[3][b]), head[3], head[4]


__all__ = ["first_pass", "second_pass", "BLOCK"]
