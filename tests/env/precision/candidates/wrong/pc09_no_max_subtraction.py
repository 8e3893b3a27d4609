"""Wrong: softmax without the max subtraction (exp of the raw logits, one pass): right for logits of
moderate size, inf/NaN once inputs are scaled up (logits above ~88 overflow fp32's exp)."""
import math

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _flash_fwd_kernel(q_ptr, k_ptr, v_ptr, o_ptr, S, sm_scale,
                      D: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    bh = tl.program_id(0)
    offs_m = tl.program_id(1) * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, D)
    base = bh * S * D
    q = tl.load(q_ptr + base + offs_m[:, None] * D + offs_d[None, :], mask=offs_m[:, None] < S, other=0.0)
    l_i = tl.zeros((BLOCK_M,), dtype=tl.float32)
    acc = tl.zeros((BLOCK_M, D), dtype=tl.float32)
    for n0 in range(0, S, BLOCK_N):
        kn = n0 + offs_n
        k = tl.load(k_ptr + base + kn[None, :] * D + offs_d[:, None], mask=kn[None, :] < S, other=0.0)
        s = tl.dot(q, k, input_precision="tf32x3") * sm_scale
        p = tl.where(kn[None, :] < S, tl.exp(s), 0.0)
        l_i += tl.sum(p, axis=1)
        v = tl.load(v_ptr + base + kn[:, None] * D + offs_d[None, :], mask=kn[:, None] < S, other=0.0)
        acc += tl.dot(p, v, input_precision="tf32x3")
    out = acc / l_i[:, None]
    tl.store(o_ptr + base + offs_m[:, None] * D + offs_d[None, :], out, mask=offs_m[:, None] < S)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, q, k, v):
        q, k, v = q.contiguous(), k.contiguous(), v.contiguous()
        B, H, S, D = q.shape
        o = torch.empty_like(q)
        BM, BN = 64, 32
        grid = (B * H, triton.cdiv(S, BM))
        _flash_fwd_kernel[grid](q, k, v, o, S, 1.0 / math.sqrt(D), D=D, BLOCK_M=BM, BLOCK_N=BN,
                                num_warps=4, num_stages=2)
        return o
