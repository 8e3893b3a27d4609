"""Honest: LayerNorm with one row per program in registers: mean, then the centred (two-pass) variance,
rstd = 1/sqrt(var + eps), affine epilogue."""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _ln_kernel(x_ptr, w_ptr, b_ptr, y_ptr, D, eps, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    offs = tl.arange(0, BLOCK)
    mask = offs < D
    x = tl.load(x_ptr + row * D + offs, mask=mask, other=0.0)
    mean = tl.sum(x, axis=0) / D
    xc = tl.where(mask, x - mean, 0.0)
    var = tl.sum(xc * xc, axis=0) / D
    rstd = 1.0 / tl.sqrt(var + eps)
    w = tl.load(w_ptr + offs, mask=mask, other=0.0)
    b = tl.load(b_ptr + offs, mask=mask, other=0.0)
    tl.store(y_ptr + row * D + offs, xc * rstd * w + b, mask=mask)


class ModelNew(nn.Module):
    def __init__(self, hidden, eps):
        super().__init__()
        self.hidden = hidden
        self.eps = eps
        self.weight = nn.Parameter(1.0 + 0.5 * torch.randn(hidden))
        self.bias = nn.Parameter(0.5 * torch.randn(hidden))

    def forward(self, x):
        x = x.contiguous()
        D = self.hidden
        rows = x.numel() // D
        y = torch.empty_like(x)
        BLOCK = triton.next_power_of_2(D)
        _ln_kernel[(rows,)](x, self.weight, self.bias, y, D, self.eps, BLOCK=BLOCK, num_warps=8 if BLOCK >= 2048 else 4)
        return y
