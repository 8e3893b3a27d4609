"""Softmax where exp of every logit more than 10 below the row max is rounded to bf16 (both in the
output and in the normaliser): those probabilities (< 4.5e-5 of the largest) keep 8 bits."""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _softmax_kernel(x_ptr, out_ptr, N, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    offs = tl.arange(0, BLOCK)
    mask = offs < N
    x = tl.load(x_ptr + row * N + offs, mask=mask, other=float("-inf"))
    m = tl.max(x, axis=0)
    d = x - m
    e = tl.exp(d)
    e_lo = e.to(tl.bfloat16).to(tl.float32)
    e = tl.where(d < -10.0, e_lo, e)
    s = tl.sum(e, axis=0)
    tl.store(out_ptr + row * N + offs, e / s, mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        N = x.shape[-1]
        rows = x.numel() // N
        out = torch.empty_like(x)
        BLOCK = triton.next_power_of_2(N)
        _softmax_kernel[(rows,)](x, out, N, BLOCK=BLOCK, num_warps=4)
        return out
