"""Triton solution: x * sigmoid(x) * scale + bias in one elementwise pass."""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _swish_scale_bias_kernel(x_ptr, b_ptr, y_ptr, C, stride_x, stride_y, scale, BLOCK_C: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    offs = tl.program_id(1) * BLOCK_C + tl.arange(0, BLOCK_C)
    mask = offs < C
    x = tl.load(x_ptr + row * stride_x + offs, mask=mask, other=0.0)
    b = tl.load(b_ptr + offs, mask=mask, other=0.0)
    tl.store(y_ptr + row * stride_y + offs, x * tl.sigmoid(x) * scale + b, mask=mask)


class ModelNew(nn.Module):
    def __init__(self, num_cols, scaling_factor):
        super().__init__()
        self.bias = nn.Parameter(torch.randn(num_cols) * 0.5)
        self.scaling_factor = scaling_factor

    def forward(self, x):
        C = x.shape[-1]
        x2 = x.reshape(-1, C).contiguous()
        y = torch.empty_like(x2)
        block_c = min(2048, triton.next_power_of_2(C))
        grid = (x2.shape[0], triton.cdiv(C, block_c))
        _swish_scale_bias_kernel[grid](x2, self.bias, y, C, x2.stride(0), y.stride(0), float(self.scaling_factor),
                                       BLOCK_C=block_c, num_warps=4)
        return y.view(x.shape)
