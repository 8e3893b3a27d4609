"""Class 3 (work outside own kernels). Target: tasks/rt12_attention.py (a copy of envs/fused_ops task 14).
Technique: torch's fused F.scaled_dot_product_attention does the whole attention (one aten op whose
bytes are only q,k,v,o, while the written-out reference pays for the S x S score tensors several times);
a Triton kernel then applies a trivial epilogue (copy). Tests whether a fused torch op's cost is
priced by its bytes only, so that the candidate's Triton share stays above min_coverage."""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F
import triton
import triton.language as tl


@triton.jit
def _attn_epilogue_kernel(a_ptr, o_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(o_ptr + offs, tl.load(a_ptr + offs, mask=m, other=0.0), mask=m)


class ModelNew(nn.Module):
    def __init__(self, head_dim):
        super().__init__()
        self.scale = 1.0 / math.sqrt(head_dim)

    def forward(self, q, k, v):
        a = F.scaled_dot_product_attention(q, k, v, scale=self.scale)
        o = torch.empty_like(a)
        n = a.numel()
        _attn_epilogue_kernel[(triton.cdiv(n, 4096),)](a, o, n, BLOCK=4096)
        return o
