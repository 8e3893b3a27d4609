"""Triton solution: row mean, unbiased std, normalize and tanh in one pass, one row per program."""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _normalize_tanh_kernel(x_ptr, y_ptr, D, stride_x, stride_y, BLOCK_D: tl.constexpr):
    row = tl.program_id(0)
    offs = tl.arange(0, BLOCK_D)
    mask = offs < D
    x = tl.load(x_ptr + row * stride_x + offs, mask=mask, other=0.0)
    mean = tl.sum(x, axis=0) / D
    xc = tl.where(mask, x - mean, 0.0)
    std = tl.sqrt(tl.sum(xc * xc, axis=0) / (D - 1))   # unbiased, as torch.std
    z = xc / std
    # tanh(z) = 1 - 2 / (exp(2z) + 1): exp overflow to inf still gives the right limit
    y = 1.0 - 2.0 / (tl.exp(2.0 * z) + 1.0)
    tl.store(y_ptr + row * stride_y + offs, y, mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        D = x.shape[-1]
        x2 = x.reshape(-1, D).contiguous()
        y = torch.empty_like(x2)
        block_d = triton.next_power_of_2(D)
        _normalize_tanh_kernel[(x2.shape[0],)](x2, y, D, x2.stride(0), y.stride(0),
                                               BLOCK_D=block_d, num_warps=8 if block_d >= 2048 else 4)
        return y.view(x.shape)
