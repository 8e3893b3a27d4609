"""Wrong: normalises over the wrong axis (columns instead of rows). Devices: both."""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _l2norm_kernel(x_ptr, y_ptr, D, stride, eps, BLOCK_D: tl.constexpr):
    col = tl.program_id(0)
    offs = tl.arange(0, BLOCK_D)
    mask = offs < D                      # D here is the number of rows: reduces down a column
    x = tl.load(x_ptr + offs * stride + col, mask=mask, other=0.0)
    nrm = tl.sqrt(tl.sum(x * x, axis=0))
    nrm = tl.maximum(nrm, eps)
    tl.store(y_ptr + offs * stride + col, x / nrm, mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        x = x.contiguous()
        y = torch.empty_like(x)
        R, D = x.shape
        _l2norm_kernel[(D,)](x, y, R, x.stride(0), 1e-12, BLOCK_D=triton.next_power_of_2(R))
        return y
