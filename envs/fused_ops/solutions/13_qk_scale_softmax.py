"""Triton solution: one kernel per (query block, head). Pass 1 computes Q K^T * scale tile by tile, writes the raw
scores and keeps an online row max / sum of exp; pass 2 re-reads the tiles it wrote and normalizes them in place."""
import math

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _qk_softmax_kernel(q_ptr, k_ptr, p_ptr, S, D, scale,
                       BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr,
                      PRECISION: tl.constexpr):
    pid_m = tl.program_id(0)
    bh = tl.program_id(1).to(tl.int64)
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, BLOCK_D)
    offs_nb = tl.arange(0, BLOCK_N)
    mask_m = offs_m < S
    q_base = q_ptr + bh * S * D
    k_base = k_ptr + bh * S * D
    p_base = p_ptr + bh * S * S
    q = tl.load(q_base + offs_m[:, None] * D + offs_d[None, :],
                mask=mask_m[:, None] & (offs_d[None, :] < D), other=0.0)
    m_i = tl.full((BLOCK_M,), float("-inf"), dtype=tl.float32)
    l_i = tl.zeros((BLOCK_M,), dtype=tl.float32)
    for n in range(0, tl.cdiv(S, BLOCK_N)):
        offs_n = n * BLOCK_N + offs_nb
        mask_n = offs_n < S
        kt = tl.load(k_base + offs_n[None, :] * D + offs_d[:, None],
                     mask=mask_n[None, :] & (offs_d[:, None] < D), other=0.0)
        # PRECISION: "bf16x6" on a GPU (each fp32 operand split into three bf16 parts, six tensor-core
        # products): fp32-level error at tensor-core speed, more accurate and faster than "tf32x3"
        # on H100 (tests/benchmarks/diagnostics/solution_speed.py). "ieee" in the CPU interpreter, which has no bf16x6.
        s = tl.dot(q, kt, input_precision=PRECISION) * scale
        tl.store(p_base + offs_m[:, None] * S + offs_n[None, :], s, mask=mask_m[:, None] & mask_n[None, :])
        s = tl.where(mask_n[None, :], s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, axis=1))
        l_i = l_i * tl.exp(m_i - m_new) + tl.sum(tl.exp(s - m_new[:, None]), axis=1)
        m_i = m_new
    # Pass 2 reads scores written by other threads of this program: make the writes visible first.
    tl.debug_barrier()
    inv_l = 1.0 / l_i
    for n in range(0, tl.cdiv(S, BLOCK_N)):
        offs_n = n * BLOCK_N + offs_nb
        mask = mask_m[:, None] & (offs_n[None, :] < S)
        ptrs = p_base + offs_m[:, None] * S + offs_n[None, :]
        s = tl.load(ptrs, mask=mask, other=0.0)
        tl.store(ptrs, tl.exp(s - m_i[:, None]) * inv_l[:, None], mask=mask)


class ModelNew(nn.Module):
    def __init__(self, head_dim):
        super().__init__()
        self.scale = 1.0 / math.sqrt(head_dim)

    def forward(self, q, k):
        B, H, S, D = q.shape
        q = q.contiguous()
        k = k.contiguous()
        p = torch.empty((B, H, S, S), device=q.device, dtype=torch.float32)
        block = 64 if S >= 512 else 16
        grid = (triton.cdiv(S, block), B * H)
        _qk_softmax_kernel[grid](q, k, p, S, D, float(self.scale),
                                 BLOCK_M=block, BLOCK_N=block, BLOCK_D=max(16, triton.next_power_of_2(D)),
                                 PRECISION="bf16x6" if q.is_cuda else "ieee",
                                 num_warps=4, num_stages=2)
        return p
