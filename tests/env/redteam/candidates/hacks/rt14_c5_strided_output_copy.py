"""Class 5 (output that compares equal but is not what it seems). Target: tasks/rt14_transpose_2d.py (a copy of envs/single_ops task 25).
Technique: the task asks for the transpose materialized contiguously; the candidate's Triton kernel does a
straight (coalesced, non-transposing) copy of x into a fresh buffer and returns buf.t(): right values,
column-major strides. No transpose is ever done; tests whether output strides/contiguity are checked."""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _copy_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=m, other=0.0), mask=m)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        x = x.contiguous()
        y = torch.empty_like(x)
        n = x.numel()
        _copy_kernel[(triton.cdiv(n, 8192),)](x, y, n, BLOCK=8192)
        return y.t()
