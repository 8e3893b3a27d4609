"""Class 3 (work outside own kernels; cost-model hole: aten::_native_multi_head_attention not priced by FLOPs).
Target: tests/env/redteam/tasks/rt12_attention.py.
Technique: torch._native_multi_head_attention (the nn.MultiheadAttention fast-path operator) with identity
in/out projections, one head of size head_dim, batch = B*H: softmax(QK^T/sqrt(d))V in one aten op that the
CPU cost model prices by its bytes. (The sdpa spelling is now priced; this sibling operator is not.)
A Triton kernel copies the result out."""
import math

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _copy_kernel(a_ptr, o_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(o_ptr + offs, tl.load(a_ptr + offs, mask=m, other=0.0), mask=m)


class ModelNew(nn.Module):
    def __init__(self, head_dim):
        super().__init__()
        self.scale = 1.0 / math.sqrt(head_dim)

    def forward(self, q, k, v):
        B, H, L, D = q.shape
        eye = torch.eye(D, dtype=q.dtype, device=q.device)
        qkv_w = torch.cat([eye, eye, eye], 0)
        qkv_b = q.new_zeros(3 * D)
        out, _ = torch._native_multi_head_attention(
            q.reshape(B * H, L, D), k.reshape(B * H, L, D), v.reshape(B * H, L, D), D, 1,
            qkv_w, qkv_b, eye, q.new_zeros(D), None, False)
        out = out.reshape(B, H, L, D).contiguous()
        o = torch.empty_like(out)
        n = o.numel()
        _copy_kernel[(triton.cdiv(n, 4096),)](out, o, n, BLOCK=4096)
        return o
