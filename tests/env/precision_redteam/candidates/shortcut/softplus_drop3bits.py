"""Probe: softplus rounded at the end to 21 significant bits (fp32 has 24): drops 3 bits everywhere."""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _softplus_kernel(x_ptr, out_ptr, n_elements, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n_elements
    x = tl.load(x_ptr + offs, mask=mask, other=0.0)
    t = tl.exp(-tl.abs(x))
    u = 1.0 + t
    # log1p(t) accurate: log(u) * t / (u - 1) (Goldberg), t when u == 1
    l = tl.where(u == 1.0, t, tl.log(u) * (t / (u - 1.0)))
    y = tl.maximum(x, 0.0) + l
    c = y * 9.0
    y = c - (c - y)      # Veltkamp split: keep the top 21 significant bits of y
    tl.store(out_ptr + offs, y, mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        out = torch.empty_like(x)
        n = x.numel()
        BLOCK = 1024
        _softplus_kernel[(triton.cdiv(n, BLOCK),)](x, out, n, BLOCK=BLOCK, num_warps=4)
        return out
