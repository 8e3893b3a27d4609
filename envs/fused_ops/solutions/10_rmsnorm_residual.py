"""Triton solution: RMSNorm * weight + residual in one pass, one row per program held in registers."""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _rmsnorm_residual_kernel(x_ptr, r_ptr, w_ptr, y_ptr, D, stride_x, stride_r, stride_y, eps,
                             BLOCK_D: tl.constexpr):
    row = tl.program_id(0)
    offs = tl.arange(0, BLOCK_D)
    mask = offs < D
    x = tl.load(x_ptr + row * stride_x + offs, mask=mask, other=0.0)
    ms = tl.sum(x * x, axis=0) / D
    rinv = 1.0 / tl.sqrt(ms + eps)
    w = tl.load(w_ptr + offs, mask=mask, other=0.0)
    r = tl.load(r_ptr + row * stride_r + offs, mask=mask, other=0.0)
    tl.store(y_ptr + row * stride_y + offs, x * rinv * w + r, mask=mask)


class ModelNew(nn.Module):
    def __init__(self, hidden_size, eps):
        super().__init__()
        self.weight = nn.Parameter(1.0 + 0.5 * torch.randn(hidden_size))
        self.eps = eps

    def forward(self, x, residual):
        D = x.shape[-1]
        x2 = x.reshape(-1, D).contiguous()
        r2 = residual.reshape(-1, D).contiguous()
        y = torch.empty_like(x2)
        block_d = triton.next_power_of_2(D)
        _rmsnorm_residual_kernel[(x2.shape[0],)](x2, r2, self.weight, y, D, x2.stride(0), r2.stride(0),
                                                 y.stride(0), float(self.eps),
                                                 BLOCK_D=block_d, num_warps=8 if block_d >= 2048 else 4)
        return y.view(x.shape)
