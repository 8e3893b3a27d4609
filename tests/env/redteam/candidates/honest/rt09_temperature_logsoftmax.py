"""Honest: row log-softmax of x / temperature, the temperature passed to the kernel. Devices: both."""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _temp_log_softmax_kernel(x_ptr, y_ptr, C, inv_t, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    offs = tl.arange(0, BLOCK)
    m = offs < C
    z = tl.load(x_ptr + row * C + offs, mask=m, other=float("-inf")) * inv_t
    mx = tl.max(z, axis=0)
    lse = tl.log(tl.sum(tl.where(m, tl.exp(z - mx), 0.0), axis=0)) + mx
    tl.store(y_ptr + row * C + offs, z - lse, mask=m)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x, temperature: float):
        x = x.contiguous()
        R, C = x.shape
        y = torch.empty_like(x)
        _temp_log_softmax_kernel[(R,)](x, y, C, 1.0 / float(temperature), BLOCK=triton.next_power_of_2(C))
        return y
