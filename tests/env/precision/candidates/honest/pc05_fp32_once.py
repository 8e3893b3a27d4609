"""Honest: fp16 RMSNorm with one row per program: x widened to fp32, mean of squares in fp32, rsqrt,
times the weight, rounded to fp16 once at the store."""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _rmsnorm_kernel(x_ptr, w_ptr, y_ptr, D, eps, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    offs = tl.arange(0, BLOCK)
    mask = offs < D
    x = tl.load(x_ptr + row * D + offs, mask=mask, other=0.0).to(tl.float32)
    ms = tl.sum(x * x, axis=0) / D
    r = 1.0 / tl.sqrt(ms + eps)
    w = tl.load(w_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    tl.store(y_ptr + row * D + offs, (x * r * w).to(tl.float16), mask=mask)


class ModelNew(nn.Module):
    def __init__(self, hidden, eps):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter((1.0 + 0.5 * torch.randn(hidden)).to(torch.float16))

    def forward(self, x):
        x = x.contiguous()
        D = x.shape[-1]
        rows = x.numel() // D
        y = torch.empty_like(x)
        BLOCK = triton.next_power_of_2(D)
        _rmsnorm_kernel[(rows,)](x, self.weight, y, D, self.eps, BLOCK=BLOCK, num_warps=8 if BLOCK >= 2048 else 4)
        return y
