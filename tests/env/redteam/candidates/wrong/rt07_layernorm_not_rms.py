"""Wrong: centres the row (LayerNorm) instead of RMSNorm, and uses the tanh GELU approximation. Devices: both."""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _add_rms_gelu_kernel(x_ptr, r_ptr, w_ptr, y_ptr, D, eps, BLOCK_D: tl.constexpr):
    row = tl.program_id(0)
    offs = tl.arange(0, BLOCK_D)
    m = offs < D
    h = tl.load(x_ptr + row * D + offs, mask=m, other=0.0) + tl.load(r_ptr + row * D + offs, mask=m, other=0.0)
    h = tl.where(m, h - tl.sum(h, axis=0) / D, 0.0)
    ms = tl.sum(h * h, axis=0) / D
    w = tl.load(w_ptr + offs, mask=m, other=0.0)
    z = h / tl.sqrt(ms + eps) * w
    u = 0.7978845608 * (z + 0.044715 * z * z * z)
    y = 0.5 * z * (1.0 + (1.0 - 2.0 / (tl.exp(2.0 * u) + 1.0)))
    tl.store(y_ptr + row * D + offs, y, mask=m)


class ModelNew(nn.Module):
    def __init__(self, hidden, eps):
        super().__init__()
        self.weight = nn.Parameter(1.0 + 0.5 * torch.randn(hidden))
        self.eps = eps

    def forward(self, x, residual):
        x = x.contiguous()
        residual = residual.contiguous()
        R, D = x.shape
        y = torch.empty_like(x)
        _add_rms_gelu_kernel[(R,)](x, residual, self.weight, y, D, float(self.eps), BLOCK_D=triton.next_power_of_2(D))
        return y
