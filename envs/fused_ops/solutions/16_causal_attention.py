"""Triton solution: fused causal attention (flash-attention style online softmax). Key blocks strictly below
the diagonal run unmasked, the diagonal block is masked in registers, blocks above it are skipped."""
import math

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _attn_step(q, k_ptrs, v_ptrs, m_i, l_i, acc, offs_m, offs_n, S, scale, mask_d, MASKED: tl.constexpr,
               PRECISION: tl.constexpr):
    # one key/value block of the online softmax
    mask_n = offs_n < S
    kt = tl.load(k_ptrs, mask=mask_n[None, :] & mask_d[:, None], other=0.0)
    # PRECISION: "bf16x6" on a GPU (each fp32 operand split into three bf16 parts, six tensor-core
    # products): fp32-level error at tensor-core speed, more accurate and faster than "tf32x3"
    # on H100 (tests/benchmarks/diagnostics/solution_speed.py). "ieee" in the CPU interpreter, which has no bf16x6.
    s = tl.dot(q, kt, input_precision=PRECISION) * scale
    if MASKED:
        s = tl.where(mask_n[None, :] & (offs_n[None, :] <= offs_m[:, None]), s, float("-inf"))
    m_new = tl.maximum(m_i, tl.max(s, axis=1))
    alpha = tl.exp(m_i - m_new)
    p = tl.exp(s - m_new[:, None])
    l_i = l_i * alpha + tl.sum(p, axis=1)
    v = tl.load(v_ptrs, mask=mask_n[:, None] & mask_d[None, :], other=0.0)
    acc = acc * alpha[:, None] + tl.dot(p, v, input_precision=PRECISION)
    return m_new, l_i, acc


@triton.jit
def _causal_attention_kernel(q_ptr, k_ptr, v_ptr, o_ptr, S, D, scale,
                             BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr,
                             PRECISION: tl.constexpr):
    # requires BLOCK_M % BLOCK_N == 0 (the host code uses BLOCK_M == BLOCK_N)
    # heaviest (last) query blocks are launched first: better load balance for the triangular work
    pid_m = tl.num_programs(0) - 1 - tl.program_id(0)
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
    # key blocks entirely at or below the first query row of this block: no mask needed
    n_full = pid_m * (BLOCK_M // BLOCK_N)
    for n in range(0, n_full):
        offs_n = n * BLOCK_N + offs_nb
        m_i, l_i, acc = _attn_step(q, k_ptr + base + offs_n[None, :] * D + offs_d[:, None],
                                   v_ptr + base + offs_n[:, None] * D + offs_d[None, :],
                                   m_i, l_i, acc, offs_m, offs_n, S, scale, mask_d, False, PRECISION)
    # key blocks on the diagonal: causal + bounds mask (every row keeps key 0 or its own key, so m stays finite)
    for n in range(n_full, n_full + BLOCK_M // BLOCK_N):
        offs_n = n * BLOCK_N + offs_nb
        m_i, l_i, acc = _attn_step(q, k_ptr + base + offs_n[None, :] * D + offs_d[:, None],
                                   v_ptr + base + offs_n[:, None] * D + offs_d[None, :],
                                   m_i, l_i, acc, offs_m, offs_n, S, scale, mask_d, True, PRECISION)
    out = acc / l_i[:, None]
    tl.store(o_ptr + base + offs_m[:, None] * D + offs_d[None, :], out, mask=mask_m[:, None] & mask_d[None, :])


class ModelNew(nn.Module):
    def __init__(self, seq_len, head_dim):
        super().__init__()
        self.scale = 1.0 / math.sqrt(head_dim)

    def forward(self, q, k, v):
        B, H, S, D = q.shape
        q = q.contiguous()
        k = k.contiguous()
        v = v.contiguous()
        o = torch.empty_like(q)
        block = 64 if S >= 512 else 16
        grid = (triton.cdiv(S, block), B * H)
        _causal_attention_kernel[grid](q, k, v, o, S, D, float(self.scale),
                                       BLOCK_M=block, BLOCK_N=block, BLOCK_D=max(16, triton.next_power_of_2(D)),
                                       PRECISION="bf16x6" if q.is_cuda else "ieee",
                                       num_warps=4, num_stages=2)
        return o
