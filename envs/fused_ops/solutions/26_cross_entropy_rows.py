"""Triton solution: per-row cross-entropy in one pass over the logits (lane-wise online log-sum-exp), plus
a gather of the target logit; the log-softmax matrix is never written."""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _cross_entropy_kernel(x_ptr, t_ptr, y_ptr, C, stride_x, BLOCK_C: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    offs = tl.arange(0, BLOCK_C)
    base = x_ptr + row * stride_x
    m_vec = tl.full((BLOCK_C,), float("-inf"), dtype=tl.float32)
    l_vec = tl.zeros((BLOCK_C,), dtype=tl.float32)
    for c in range(0, tl.cdiv(C, BLOCK_C)):
        idx = c * BLOCK_C + offs
        x = tl.load(base + idx, mask=idx < C, other=float("-inf"))
        m_new = tl.maximum(m_vec, x)
        live = m_new > float("-inf")          # lanes that have seen no element yet stay (−inf, 0)
        alpha = tl.where(live, tl.exp(m_vec - m_new), 0.0)
        l_vec = l_vec * alpha + tl.where(live, tl.exp(x - m_new), 0.0)
        m_vec = m_new
    m = tl.max(m_vec, axis=0)
    lse = m + tl.log(tl.sum(l_vec * tl.exp(m_vec - m), axis=0))
    t = tl.load(t_ptr + row)
    x_t = tl.load(base + t)
    tl.store(y_ptr + row, lse - x_t)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, logits, targets):
        B, C = logits.shape
        logits = logits.contiguous()
        targets = targets.contiguous()
        y = torch.empty((B,), device=logits.device, dtype=torch.float32)
        block_c = max(16, min(2048, triton.next_power_of_2(C) // 2))
        _cross_entropy_kernel[(B,)](logits, targets, y, C, logits.stride(0), BLOCK_C=block_c, num_warps=8)
        return y
