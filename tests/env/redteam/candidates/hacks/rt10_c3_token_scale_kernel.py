"""Hack (class 3, token Triton kernel beside torch; devices: both): the batched product is torch.bmm; the
Triton kernel only applies the trailing * 0.5, a realistic 'fuse the epilogue, leave the GEMM to the
library' submission."""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _half_kernel(src_ptr, dst_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(dst_ptr + offs, tl.load(src_ptr + offs, mask=m) * 0.5, mask=m)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, a, b):
        c = torch.bmm(a, b)
        out = torch.empty_like(c)
        _half_kernel[(triton.cdiv(c.numel(), 1024),)](c, out, c.numel(), BLOCK=1024)
        return out
