"""Triton solution: scale, causal mask and softmax in one pass, one score row per program; masked
entries are never read and are written as zeros."""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _causal_softmax_kernel(x_ptr, y_ptr, S, scale, BLOCK_S: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    i = row % S                      # query position of this row
    offs = tl.arange(0, BLOCK_S)
    in_row = offs < S
    keep = in_row & (offs <= i)
    x = tl.load(x_ptr + row * S + offs, mask=keep, other=float("-inf"))
    s = x * scale
    m = tl.max(s, axis=0)
    e = tl.where(keep, tl.exp(s - m), 0.0)
    y = e / tl.sum(e, axis=0)
    tl.store(y_ptr + row * S + offs, y, mask=in_row)


class ModelNew(nn.Module):
    def __init__(self, seq_len, scale):
        super().__init__()
        self.scale = scale

    def forward(self, x):
        S = x.shape[-1]
        x = x.contiguous()
        y = torch.empty_like(x)
        rows = x.numel() // S
        block_s = triton.next_power_of_2(S)
        _causal_softmax_kernel[(rows,)](x, y, S, float(self.scale), BLOCK_S=block_s,
                                        num_warps=4 if block_s <= 2048 else 8)
        return y
