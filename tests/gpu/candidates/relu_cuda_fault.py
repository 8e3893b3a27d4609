"""A kernel that writes far out of bounds: an illegal memory access (CUDA fault).
The candidate's process dies or its CUDA context is lost; the grader must report a failed result
and the next evaluation must be unaffected."""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def bad_relu(x_ptr, o_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    x = tl.load(x_ptr + offs, mask=m)
    tl.store(o_ptr + offs + (1 << 40), tl.maximum(x, 0.0), mask=m)


class ModelNew(nn.Module):
    def forward(self, x):
        out = torch.empty_like(x)
        bad_relu[(triton.cdiv(x.numel(), 1024),)](x, out, x.numel(), BLOCK=1024)
        return out
