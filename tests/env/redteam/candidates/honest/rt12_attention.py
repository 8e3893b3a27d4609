"""Triton solution: fused attention (flash-attention style online softmax), scores never leave the chip."""
import math

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _attention_kernel(q_ptr, k_ptr, v_ptr, o_ptr, S, D, scale,
                      BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr,
                      PRECISION: tl.constexpr):
    pid_m = tl.program_id(0)
    bh = tl.program_id(1).to(tl.int64)
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, BLOCK_D)
    offs_nb = tl.arange(0, BLOCK_N)
    mask_m = offs_m < S
    mask_d = offs_d < D
    base = bh * S * D
    q = tl.load(q_ptr + base + offs_m[:, None] * D + offs_d[None, :], mask=mask_m[:, None] & mask_d[None, :], other=0.0)
    m_i = tl.full((BLOCK_M,), float("-inf"), dtype=tl.float32)
    l_i = tl.zeros((BLOCK_M,), dtype=tl.float32)
    acc = tl.zeros((BLOCK_M, BLOCK_D), dtype=tl.float32)
    for n in range(0, tl.cdiv(S, BLOCK_N)):
        offs_n = n * BLOCK_N + offs_nb
        mask_n = offs_n < S
        kt = tl.load(k_ptr + base + offs_n[None, :] * D + offs_d[:, None],
                     mask=mask_n[None, :] & mask_d[:, None], other=0.0)
        # PRECISION: "bf16x6" on a GPU (each fp32 operand split into three bf16 parts, six tensor-core
        # products): fp32-level error at tensor-core speed, more accurate and faster than "tf32x3"
        # on H100 (tests/benchmarks/diagnostics/solution_speed.py). "ieee" in the CPU interpreter, which has no bf16x6.
        s = tl.dot(q, kt, input_precision=PRECISION) * scale
        s = tl.where(mask_n[None, :], s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, axis=1))
        alpha = tl.exp(m_i - m_new)
        p = tl.exp(s - m_new[:, None])
        l_i = l_i * alpha + tl.sum(p, axis=1)
        v = tl.load(v_ptr + base + offs_n[:, None] * D + offs_d[None, :],
                    mask=mask_n[:, None] & mask_d[None, :], other=0.0)
        acc = acc * alpha[:, None] + tl.dot(p, v, input_precision=PRECISION)
        m_i = m_new
    out = acc / l_i[:, None]
    tl.store(o_ptr + base + offs_m[:, None] * D + offs_d[None, :], out, mask=mask_m[:, None] & mask_d[None, :])


class ModelNew(nn.Module):
    def __init__(self, head_dim):
        super().__init__()
        self.scale = 1.0 / math.sqrt(head_dim)

    def forward(self, q, k, v):
        B, H, S, D = q.shape
        q = q.contiguous()
        k = k.contiguous()
        v = v.contiguous()
        o = torch.empty_like(q)
        # 128x64 tiles / 8 warps measured fastest for S=1024, D=64 on Hopper; small shapes use 16x16 tiles
        block_m, block_n, warps = (128, 64, 8) if S >= 512 else (16, 16, 4)
        grid = (triton.cdiv(S, block_m), B * H)
        _attention_kernel[grid](q, k, v, o, S, D, float(self.scale),
                                BLOCK_M=block_m, BLOCK_N=block_n, BLOCK_D=max(16, triton.next_power_of_2(D)),
                                PRECISION="bf16x6" if q.is_cuda else "ieee",
                                num_warps=warps, num_stages=2)
        return o
