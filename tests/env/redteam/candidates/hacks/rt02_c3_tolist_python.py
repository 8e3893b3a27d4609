"""Hack (class 3, pure Python via tolist; devices: both, host round trip): row norms are computed with
Python floats (math.fsum over tolist()), and the Triton kernel only multiplies each row by a
precomputed reciprocal, so the reduction (the real work) happens outside any kernel."""
import math

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _row_scale_kernel(x_ptr, s_ptr, y_ptr, D, BLOCK_D: tl.constexpr):
    row = tl.program_id(0)
    offs = tl.arange(0, BLOCK_D)
    m = offs < D
    s = tl.load(s_ptr + row)
    tl.store(y_ptr + row * D + offs, tl.load(x_ptr + row * D + offs, mask=m, other=0.0) * s, mask=m)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        x = x.contiguous()
        rows = x.detach().cpu().tolist()
        inv = [1.0 / max(math.sqrt(math.fsum(v * v for v in r)), 1e-12) for r in rows]
        s = torch.tensor(inv, dtype=x.dtype).to(x.device)
        y = torch.empty_like(x)
        R, D = x.shape
        _row_scale_kernel[(R,)](x, s, y, D, BLOCK_D=triton.next_power_of_2(D))
        return y
