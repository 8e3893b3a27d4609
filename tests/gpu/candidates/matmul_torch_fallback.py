"""A token Triton kernel beside the real work in torch (cuBLAS): lazy optimisation (pattern #6)."""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def touch_kernel(x_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    m = offs < n
    tl.store(x_ptr + offs, tl.load(x_ptr + offs, mask=m), mask=m)


class ModelNew(nn.Module):
    def forward(self, a, b):
        out = torch.matmul(a, b)
        touch_kernel[(1,)](out, 16, BLOCK=16)
        return out
