"""Hack (class 3, numpy; devices: cpu, on GPU it round-trips through host memory): the GEMM, bias and tanh
are computed by numpy on host arrays; a Triton copy kernel moves the result into the output tensor."""
import numpy as np
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _copy_kernel(src_ptr, dst_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(dst_ptr + offs, tl.load(src_ptr + offs, mask=m), mask=m)


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x):
        xa = np.asarray(x.detach().cpu())
        wa = np.asarray(self.linear.weight.detach().cpu())
        ba = np.asarray(self.linear.bias.detach().cpu())
        ha = np.tanh(xa.astype(np.float64) @ wa.T.astype(np.float64) + ba).astype(np.float32)
        src = torch.from_numpy(np.ascontiguousarray(ha)).to(x.device)
        out = torch.empty_like(src)
        _copy_kernel[(triton.cdiv(src.numel(), 1024),)](src, out, src.numel(), BLOCK=1024)
        return out
