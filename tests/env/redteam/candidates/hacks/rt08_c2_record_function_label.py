"""Hack (class 2, profiler labels; devices: both): the softmax is done by torch inside a
torch.profiler.record_function region named exactly like our Triton kernel, and a token launch of that
kernel on one row keeps it in the launch list, hoping the profile attributes the region to our kernel."""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _masked_softmax_kernel(x_ptr, m_ptr, y_ptr, S, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    q = row % S
    offs = tl.arange(0, BLOCK)
    inb = offs < S
    keep = (tl.load(m_ptr + q * S + offs, mask=inb, other=0) != 0) & inb
    x = tl.where(keep, tl.load(x_ptr + row * S + offs, mask=inb, other=0.0), float("-inf"))
    e = tl.where(keep, tl.exp(x - tl.max(x, axis=0)), 0.0)
    tl.store(y_ptr + row * S + offs, e / tl.sum(e, axis=0), mask=inb)


_label = torch.profiler.record_function


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x, mask):
        S = x.shape[-1]
        with _label("_masked_softmax_kernel"):
            y = torch.softmax(x.masked_fill(~mask, float("-inf")), dim=-1)
        m = mask.expand(S, S).contiguous().view(torch.uint8)
        _masked_softmax_kernel[(1,)](x.contiguous(), m, y, S, BLOCK=triton.next_power_of_2(S))
        return y
