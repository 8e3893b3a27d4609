"""Honest: fake quantisation with a reciprocal multiplication (x * (1/s), one rounding more than a
division: near a tie it may land on the other integer, as the fp32 reference may against float64),
magic-number round half to even, SiLU as d * sigmoid(d)."""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _fq_silu_kernel(x_ptr, s_ptr, y_ptr, n_rows, D, BLOCK_R: tl.constexpr, BLOCK_D: tl.constexpr):
    rows = tl.program_id(0) * BLOCK_R + tl.arange(0, BLOCK_R)
    cols = tl.program_id(1) * BLOCK_D + tl.arange(0, BLOCK_D)
    mask = (rows[:, None] < n_rows) & (cols[None, :] < D)
    offs = rows[:, None] * D + cols[None, :]
    x = tl.load(x_ptr + offs, mask=mask, other=0.0)
    s = tl.load(s_ptr + cols, mask=cols < D, other=1.0)
    inv = 1.0 / s
    v = x * inv[None, :]
    v = tl.minimum(tl.maximum(v, -128.0), 127.0)
    q = (v + 12582912.0) - 12582912.0
    d = q * s[None, :]
    y = d * tl.sigmoid(d)
    tl.store(y_ptr + offs, y, mask=mask)


class ModelNew(nn.Module):
    def __init__(self, hidden):
        super().__init__()
        self.scale = nn.Parameter(torch.full((hidden,), 1.0 / 16.0))

    def forward(self, x):
        x = x.contiguous()
        R, D = x.shape
        y = torch.empty_like(x)
        BR, BD = 8, 128
        _fq_silu_kernel[(triton.cdiv(R, BR), triton.cdiv(D, BD))](x, self.scale, y, R, D,
                                                                  BLOCK_R=BR, BLOCK_D=BD, num_warps=4)
        return y
