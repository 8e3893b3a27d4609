"""Honest: row mean split across programs: each program sums one column block of a row (tl.sum of the
block), divides by N and atomically adds it into the zeroed fp32 output; the order of the adds varies."""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _row_mean_split_kernel(x_ptr, y_ptr, N, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    offs = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    part = tl.sum(tl.load(x_ptr + row * N + offs, mask=offs < N, other=0.0), axis=0)
    tl.atomic_add(y_ptr + row, part / N)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        x = x.contiguous()
        N = x.shape[-1]
        R = x.numel() // N
        y = torch.zeros(x.shape[:-1], device=x.device, dtype=x.dtype)
        BLOCK = 2048
        _row_mean_split_kernel[(R, triton.cdiv(N, BLOCK))](x, y, N, BLOCK=BLOCK, num_warps=4)
        return y
