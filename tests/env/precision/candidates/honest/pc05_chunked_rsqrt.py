"""Honest: fp16 RMSNorm streaming each row in chunks (for rows longer than registers): a first loop
accumulates the sum of squares in an fp32 vector, tl.rsqrt, a second loop normalises and stores fp16."""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _rmsnorm_chunked_kernel(x_ptr, w_ptr, y_ptr, D, eps, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    base = row * D
    acc = tl.zeros((BLOCK,), dtype=tl.float32)
    for d0 in range(0, D, BLOCK):
        offs = d0 + tl.arange(0, BLOCK)
        x = tl.load(x_ptr + base + offs, mask=offs < D, other=0.0).to(tl.float32)
        acc += x * x
    r = tl.rsqrt(tl.sum(acc, axis=0) / D + eps)
    for d0 in range(0, D, BLOCK):
        offs = d0 + tl.arange(0, BLOCK)
        m = offs < D
        x = tl.load(x_ptr + base + offs, mask=m, other=0.0).to(tl.float32)
        w = tl.load(w_ptr + offs, mask=m, other=0.0).to(tl.float32)
        tl.store(y_ptr + base + offs, (x * r * w).to(tl.float16), mask=m)


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
        _rmsnorm_chunked_kernel[(rows,)](x, self.weight, y, D, self.eps, BLOCK=256, num_warps=4)
        return y
