"""Honest: bf16 log-softmax for long rows: one pass over chunks keeps a per-lane running max and
rescaled sum of exp2 in fp32 (online logsumexp), a second pass writes x - lse rounded to bf16 once."""
import torch
import torch.nn as nn
import triton
import triton.language as tl

LOG2E = 1.4426950408889634
LN2 = 0.6931471805599453


@triton.jit
def _log_softmax_online_kernel(x_ptr, y_ptr, N, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    base = row * N
    m = tl.full((BLOCK,), float("-inf"), dtype=tl.float32)
    s = tl.zeros((BLOCK,), dtype=tl.float32)
    for n0 in range(0, N, BLOCK):
        offs = n0 + tl.arange(0, BLOCK)
        x = tl.load(x_ptr + base + offs, mask=offs < N, other=float("-inf")).to(tl.float32) * 1.4426950408889634
        m_new = tl.maximum(m, x)
        s = s * tl.exp2(tl.where(m_new == float("-inf"), 0.0, m - m_new)) + \
            tl.exp2(tl.where(m_new == float("-inf"), float("-inf"), x - m_new))
        m = m_new
    m_row = tl.max(m, axis=0)
    total = tl.sum(s * tl.exp2(m - m_row), axis=0)
    lse = (m_row + tl.log2(total)) * 0.6931471805599453
    for n0 in range(0, N, BLOCK):
        offs = n0 + tl.arange(0, BLOCK)
        msk = offs < N
        x = tl.load(x_ptr + base + offs, mask=msk, other=0.0).to(tl.float32)
        tl.store(y_ptr + base + offs, (x - lse).to(tl.bfloat16), mask=msk)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        x = x.contiguous()
        N = x.shape[-1]
        R = x.numel() // N
        y = torch.empty_like(x)
        _log_softmax_online_kernel[(R,)](x, y, N, BLOCK=256, num_warps=4)
        return y
