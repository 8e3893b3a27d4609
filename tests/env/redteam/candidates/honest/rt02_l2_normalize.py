"""Honest: one row per program, sum of squares and the division in one Triton kernel. Devices: both."""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _l2norm_kernel(x_ptr, y_ptr, D, stride, eps, BLOCK_D: tl.constexpr):
    row = tl.program_id(0)
    offs = tl.arange(0, BLOCK_D)
    mask = offs < D
    x = tl.load(x_ptr + row * stride + offs, mask=mask, other=0.0)
    nrm = tl.sqrt(tl.sum(x * x, axis=0))
    nrm = tl.maximum(nrm, eps)
    tl.store(y_ptr + row * stride + offs, x / nrm, mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        x = x.contiguous()
        y = torch.empty_like(x)
        R, D = x.shape
        _l2norm_kernel[(R,)](x, y, D, x.stride(0), 1e-12, BLOCK_D=triton.next_power_of_2(D))
        return y
