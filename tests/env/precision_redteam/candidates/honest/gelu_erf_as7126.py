"""Exact (erf) GELU with erf from Abramowitz & Stegun 7.1.26 (absolute error <= 1.5e-7): an
approximate transcendental about as accurate as fp32 erf near 1."""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _gelu_erf_kernel(x_ptr, out_ptr, n_elements, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n_elements
    x = tl.load(x_ptr + offs, mask=mask, other=0.0)
    z = x * 0.7071067811865476
    az = tl.abs(z)
    # erf by Abramowitz & Stegun 7.1.26 (|error| <= 1.5e-7, about 1 ulp at 1)
    t = 1.0 / (1.0 + 0.3275911 * az)
    p = t * (0.254829592 + t * (-0.284496736 + t * (1.421413741 + t * (-1.453152027 + t * 1.061405429))))
    e = 1.0 - p * tl.exp(-az * az)
    erf = tl.where(z < 0, -e, e)
    y = 0.5 * x * (1.0 + erf)
    tl.store(out_ptr + offs, y, mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        out = torch.empty_like(x)
        n = x.numel()
        BLOCK = 1024
        _gelu_erf_kernel[(triton.cdiv(n, BLOCK),)](x, out, n, BLOCK=BLOCK, num_warps=4)
        return out
