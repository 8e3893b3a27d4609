"""Pattern #8 on the GPU: return torch.empty and launch a kernel that writes nothing. The caching
allocator may hand back a freed block that still holds a correct result; the grader pre-fills freed
memory with NaN, so the output is garbage (fails correctness)."""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def noop(x_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.load(x_ptr + offs, mask=offs < n)


class ModelNew(nn.Module):
    def forward(self, x):
        out = torch.empty_like(x)
        noop[(1,)](x, x.numel(), BLOCK=1024)
        return out
