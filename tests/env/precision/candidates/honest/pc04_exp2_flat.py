"""Honest: a 1-D flat elementwise kernel in fp32 (exp2-based sigmoid and erf GELU written with exp2 and
log2 constants), one bf16 rounding at the store."""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _chain_kernel(x_ptr, a_ptr, b_ptr, y_ptr, n_rows, D, BLOCK_R: tl.constexpr, BLOCK_D: tl.constexpr):
    rows = tl.program_id(0) * BLOCK_R + tl.arange(0, BLOCK_R)
    cols = tl.program_id(1) * BLOCK_D + tl.arange(0, BLOCK_D)
    mask = (rows[:, None] < n_rows) & (cols[None, :] < D)
    offs = rows[:, None] * D + cols[None, :]
    x = tl.load(x_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    a = tl.load(a_ptr + cols, mask=cols < D, other=0.0).to(tl.float32)
    b = tl.load(b_ptr + cols, mask=cols < D, other=0.0).to(tl.float32)
    h = x * a[None, :] + b[None, :]
    g = h * (0.5 + 0.5 * tl.erf(h * 0.7071067811865476))
    s = 1.0 / (1.0 + tl.exp2(-x * 1.4426950408889634))
    y = g * s
    tl.store(y_ptr + offs, y.to(tl.bfloat16), mask=mask)


class ModelNew(nn.Module):
    def __init__(self, hidden):
        super().__init__()
        self.a = nn.Parameter((1.0 + 0.3 * torch.randn(hidden)).to(torch.bfloat16))
        self.b = nn.Parameter((0.2 * torch.randn(hidden)).to(torch.bfloat16))

    def forward(self, x):
        x = x.contiguous()
        R, D = x.shape
        y = torch.empty_like(x)
        BR, BD = 4, 512
        grid = (triton.cdiv(R, BR), triton.cdiv(D, BD))
        _chain_kernel[grid](x, self.a, self.b, y, R, D, BLOCK_R=BR, BLOCK_D=BD, num_warps=4)
        return y
