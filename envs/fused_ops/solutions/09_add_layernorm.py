"""Triton solution: residual add + LayerNorm in one pass, one row per program held in registers."""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _add_layernorm_kernel(x_ptr, r_ptr, w_ptr, b_ptr, y_ptr, D, stride_x, stride_r, stride_y, eps,
                          BLOCK_D: tl.constexpr):
    row = tl.program_id(0)
    offs = tl.arange(0, BLOCK_D)
    mask = offs < D
    h = tl.load(x_ptr + row * stride_x + offs, mask=mask, other=0.0) \
        + tl.load(r_ptr + row * stride_r + offs, mask=mask, other=0.0)
    mean = tl.sum(h, axis=0) / D
    hc = tl.where(mask, h - mean, 0.0)
    var = tl.sum(hc * hc, axis=0) / D
    rstd = 1.0 / tl.sqrt(var + eps)
    w = tl.load(w_ptr + offs, mask=mask, other=0.0)
    b = tl.load(b_ptr + offs, mask=mask, other=0.0)
    tl.store(y_ptr + row * stride_y + offs, hc * rstd * w + b, mask=mask)


class ModelNew(nn.Module):
    def __init__(self, hidden_size, eps):
        super().__init__()
        self.norm = nn.LayerNorm(hidden_size, eps=eps)
        with torch.no_grad():
            self.norm.weight.copy_(1.0 + 0.5 * torch.randn(hidden_size))
            self.norm.bias.copy_(0.5 * torch.randn(hidden_size))

    def forward(self, x, residual):
        D = x.shape[-1]
        x2 = x.reshape(-1, D).contiguous()
        r2 = residual.reshape(-1, D).contiguous()
        y = torch.empty_like(x2)
        block_d = triton.next_power_of_2(D)
        _add_layernorm_kernel[(x2.shape[0],)](x2, r2, self.norm.weight, self.norm.bias, y, D,
                                              x2.stride(0), r2.stride(0), y.stride(0), float(self.norm.eps),
                                              BLOCK_D=block_d, num_warps=8 if block_d >= 2048 else 4)
        return y.view(x.shape)
