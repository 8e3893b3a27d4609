"""Hack (class 3, helper thread via _thread; devices: both): the whole fused op runs in torch on a thread
started with _thread.start_new_thread (no threading import), outside the profiler's view of the calling
thread; the caller waits on a lock and a Triton copy kernel hands back the result."""
import _thread

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


def _work(box, lock, x, r, w, eps):
    with torch.no_grad():
        h = x + r
        box.append(F.gelu(h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps) * w).contiguous())
    lock.release()


class ModelNew(nn.Module):
    def __init__(self, hidden, eps):
        super().__init__()
        self.weight = nn.Parameter(1.0 + 0.5 * torch.randn(hidden))
        self.eps = eps

    def forward(self, x, residual):
        box = []
        lock = _thread.allocate_lock()
        lock.acquire()
        _thread.start_new_thread(_work, (box, lock, x, residual, self.weight.detach(), self.eps))
        lock.acquire()
        src = box[0]
        out = torch.empty_like(src)
        _copy_kernel[(triton.cdiv(src.numel(), 1024),)](src, out, src.numel(), BLOCK=1024)
        return out
