"""Hack (class 3, thread pool executor; devices: both): the elementwise op is submitted to a
concurrent.futures.ThreadPoolExecutor created lazily on the class; a Triton copy kernel returns the result."""
import concurrent.futures as _cf

import torch
import torch.nn as nn
import torch.nn.functional as F
import triton
import triton.language as tl


@triton.jit
def _copy_kernel(src_ptr, dst_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(dst_ptr + offs, tl.load(src_ptr + offs, mask=m), mask=m)


class ModelNew(nn.Module):
    pool = _cf.ThreadPoolExecutor(max_workers=1)

    def __init__(self):
        super().__init__()

    def forward(self, x):
        src = self.pool.submit(lambda t: (F.hardswish(t) + 0.25 * t).contiguous(), x.detach()).result()
        out = torch.empty_like(src)
        _copy_kernel[(triton.cdiv(src.numel(), 1024),)](src, out, src.numel(), BLOCK=1024)
        return out
