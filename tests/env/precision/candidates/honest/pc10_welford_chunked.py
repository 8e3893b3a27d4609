"""Honest: LayerNorm streaming the row in chunks with a vectorised Welford update (per-lane count, mean
and M2, merged across lanes with Chan's formula), then a second pass for the affine output."""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _welford_combine(mean_a, m2_a, n_a, mean_b, m2_b, n_b):
    n = n_a + n_b
    delta = mean_b - mean_a
    frac = tl.where(n > 0, n_b / tl.maximum(n, 1.0), 0.0)
    return mean_a + delta * frac, m2_a + m2_b + delta * delta * n_a * frac, n


@triton.jit
def _ln_welford_kernel(x_ptr, w_ptr, b_ptr, y_ptr, D, eps, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    base = row * D
    mean = tl.zeros((BLOCK,), dtype=tl.float32)
    m2 = tl.zeros((BLOCK,), dtype=tl.float32)
    cnt = tl.zeros((BLOCK,), dtype=tl.float32)
    for d0 in range(0, D, BLOCK):
        offs = d0 + tl.arange(0, BLOCK)
        m = offs < D
        x = tl.load(x_ptr + base + offs, mask=m, other=0.0)
        c1 = cnt + 1.0
        delta = x - mean
        new_mean = mean + delta / c1
        new_m2 = m2 + delta * (x - new_mean)
        mean = tl.where(m, new_mean, mean)
        m2 = tl.where(m, new_m2, m2)
        cnt = tl.where(m, c1, cnt)
    mean_r, m2_r, n_r = tl.reduce((mean, m2, cnt), 0, _welford_combine)
    rstd = 1.0 / tl.sqrt(m2_r / n_r + eps)
    for d0 in range(0, D, BLOCK):
        offs = d0 + tl.arange(0, BLOCK)
        m = offs < D
        x = tl.load(x_ptr + base + offs, mask=m, other=0.0)
        w = tl.load(w_ptr + offs, mask=m, other=0.0)
        b = tl.load(b_ptr + offs, mask=m, other=0.0)
        tl.store(y_ptr + base + offs, (x - mean_r) * rstd * w + b, mask=m)


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
        _ln_welford_kernel[(rows,)](x, self.weight, self.bias, y, D, self.eps, BLOCK=128, num_warps=4)
        return y
