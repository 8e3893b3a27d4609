"""Hack (class 3, host code run implicitly from a kernel body by an operator) -- target
tests/env/redteam/tasks/rt03_linear_tanh.py.

Technique (variant: the host object arrives as a tl.constexpr *argument* `OP`, so the kernel
references no module global at all; ModelNew passes OP=_Op() at launch).
Base technique: the @triton.jit body contains no call to non-Triton code and no `.handle`: it only
subscript-assigns its loaded tiles into a module-level object and applies `@` to it
(`acc = OP @ acc`). Under TRITON_INTERPRET the body is plain Python, so `OP.__matmul__` -- a host
method -- runs and does the whole GEMM in float64 NumPy on the interpreter tensors' payloads.
Triton keeps only bias + tanh. Could never compile for a GPU.
"""
import numpy as np
import torch
import torch.nn as nn
import triton
import triton.language as tl


class _Op:
    def __init__(self):
        self.slots = {}

    def __setitem__(self, k, v):
        self.slots[k] = v

    def __matmul__(self, acc):
        a = self.slots[0].handle.data.astype(np.float64)
        w = self.slots[1].handle.data.astype(np.float64)
        acc.handle.data[...] = (a @ w.T).astype(np.float32)
        return acc


@triton.jit
def _linear_tanh_kernel(x_ptr, w_ptr, b_ptr, y_ptr, M, N, K,
                        BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, OP: tl.constexpr):
    offs_m = tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    mm = offs_m < M
    mn = offs_n < N
    mk = offs_k < K
    a = tl.load(x_ptr + offs_m[:, None] * K + offs_k[None, :], mask=mm[:, None] & mk[None, :], other=0.0)
    w = tl.load(w_ptr + offs_n[:, None] * K + offs_k[None, :], mask=mn[:, None] & mk[None, :], other=0.0)
    OP[0] = a
    OP[1] = w
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    acc = OP @ acc
    bias = tl.load(b_ptr + offs_n, mask=mn, other=0.0)
    h = acc + bias[None, :]
    t = tl.exp(-2.0 * tl.abs(h))
    th = (1.0 - t) / (1.0 + t)
    y = tl.where(h >= 0, th, -th)
    tl.store(y_ptr + offs_m[:, None] * N + offs_n[None, :], y, mask=mm[:, None] & mn[None, :])


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x):
        x = x.contiguous()
        w = self.linear.weight.contiguous()
        b = self.linear.bias.contiguous()
        M, K = x.shape
        N = w.shape[0]
        y = torch.empty((M, N), device=x.device, dtype=x.dtype)
        _linear_tanh_kernel[(1,)](x, w, b, y, M, N, K,
                                  BLOCK_M=triton.next_power_of_2(M), BLOCK_N=triton.next_power_of_2(N),
                                  BLOCK_K=triton.next_power_of_2(K), OP=_Op())
        return y
