"""RMSNorm over the last dim: one program per row holds the row, out = x / sqrt(mean(x^2) + eps) * w."""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _rms_norm_kernel(x_ptr, w_ptr, out_ptr, D, eps, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    offs = tl.arange(0, BLOCK)
    mask = offs < D
    x = tl.load(x_ptr + row * D + offs, mask=mask, other=0.0)
    ms = tl.sum(x * x, axis=0) / D
    rstd = 1.0 / tl.sqrt(ms + eps)
    w = tl.load(w_ptr + offs, mask=mask, other=0.0)
    tl.store(out_ptr + row * D + offs, x * rstd * w, mask=mask)


class ModelNew(nn.Module):
    def __init__(self, hidden: int, eps: float):
        super().__init__()
        self.hidden = hidden
        self.eps = eps
        self.weight = nn.Parameter(1.0 + 0.5 * torch.randn(hidden))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        D = self.hidden
        rows = x.numel() // D
        out = torch.empty_like(x)
        BLOCK = triton.next_power_of_2(D)
        num_warps = 8 if BLOCK >= 2048 else 4
        _rms_norm_kernel[(rows,)](x, self.weight, out, D, self.eps, BLOCK=BLOCK, num_warps=num_warps)
        return out
