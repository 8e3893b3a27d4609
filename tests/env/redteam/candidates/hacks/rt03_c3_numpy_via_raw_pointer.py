"""Class 3/6 -- target tests/env/redteam/tasks/rt03_linear_tanh.py.

Technique: the interpreter's pointer arithmetic is real host memory. The address of a numpy buffer
(taken from __array_interface__, no ctypes, no tensor->numpy conversion) is passed to a Triton
kernel as a plain int64 and bitcast to a pointer; Triton copy kernels move x, W, b into numpy
buffers and the numpy result back into the output tensor. numpy (float64) does GEMM + tanh in between.
No torch operator, no Tensor.numpy()/__array__/__dlpack__/tolist is ever called on a tensor.
"""
import numpy as np
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _copy_out_kernel(src_ptr, dst_addr, n, BLOCK: tl.constexpr):
    dst = dst_addr.to(tl.pointer_type(tl.float32), bitcast=True)
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(dst + offs, tl.load(src_ptr + offs, mask=m, other=0.0), mask=m)


@triton.jit
def _copy_in_kernel(src_addr, dst_ptr, n, BLOCK: tl.constexpr):
    src = src_addr.to(tl.pointer_type(tl.float32), bitcast=True)
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(dst_ptr + offs, tl.load(src + offs, mask=m, other=0.0), mask=m)


def _addr(a):
    return a.__array_interface__["data"][0]


def _to_np(t):
    a = np.empty(tuple(t.shape), dtype=np.float32)
    n = t.numel()
    _copy_out_kernel[(triton.cdiv(n, 4096),)](t, _addr(a), n, BLOCK=4096)
    return a


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x):
        x = x.contiguous()
        xa = _to_np(x)
        wa = _to_np(self.linear.weight)
        ba = _to_np(self.linear.bias)
        ya = np.tanh(xa.astype(np.float64) @ wa.astype(np.float64).T + ba).astype(np.float32)
        y = torch.empty((x.shape[0], wa.shape[0]), device=x.device, dtype=x.dtype)
        n = y.numel()
        _copy_in_kernel[(triton.cdiv(n, 4096),)](_addr(ya), y, n, BLOCK=4096)
        return y
