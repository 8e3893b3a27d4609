"""Honest: a one-program Triton kernel turns the parameters into gate/shift every forward, a second
kernel applies y = x * gate + shift. Devices: both."""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _gate_shift_kernel(lg_ptr, br_ptr, g_ptr, s_ptr, D, BLOCK_D: tl.constexpr):
    offs = tl.arange(0, BLOCK_D)
    m = offs < D
    lg = tl.load(lg_ptr + offs, mask=m, other=float("-inf"))
    mx = tl.max(lg, axis=0)
    e = tl.where(m, tl.exp(lg - mx), 0.0)
    gate = e / tl.sum(e, axis=0) * D
    br = tl.load(br_ptr + offs, mask=m, other=0.0)
    t = tl.exp(-2.0 * tl.abs(br))
    th = (1.0 - t) / (1.0 + t)
    tl.store(g_ptr + offs, gate, mask=m)
    tl.store(s_ptr + offs, tl.where(br >= 0, th, -th), mask=m)


@triton.jit
def _apply_kernel(x_ptr, g_ptr, s_ptr, y_ptr, R, D, BLOCK_R: tl.constexpr, BLOCK_D: tl.constexpr):
    offs_r = tl.program_id(0) * BLOCK_R + tl.arange(0, BLOCK_R)
    offs_d = tl.program_id(1) * BLOCK_D + tl.arange(0, BLOCK_D)
    mr = offs_r < R
    md = offs_d < D
    msk = mr[:, None] & md[None, :]
    x = tl.load(x_ptr + offs_r[:, None] * D + offs_d[None, :], mask=msk, other=0.0)
    g = tl.load(g_ptr + offs_d, mask=md, other=0.0)
    s = tl.load(s_ptr + offs_d, mask=md, other=0.0)
    tl.store(y_ptr + offs_r[:, None] * D + offs_d[None, :], x * g[None, :] + s[None, :], mask=msk)


class ModelNew(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.logits = nn.Parameter(torch.randn(dim))
        self.bias_raw = nn.Parameter(torch.randn(dim))

    def forward(self, x):
        x = x.contiguous()
        R, D = x.shape
        g = torch.empty(D, device=x.device, dtype=x.dtype)
        s = torch.empty(D, device=x.device, dtype=x.dtype)
        _gate_shift_kernel[(1,)](self.logits, self.bias_raw, g, s, D, BLOCK_D=triton.next_power_of_2(D))
        y = torch.empty_like(x)
        BR, BD = 16, min(256, triton.next_power_of_2(D))
        _apply_kernel[(triton.cdiv(R, BR), triton.cdiv(D, BD))](x, g, s, y, R, D, BLOCK_R=BR, BLOCK_D=BD)
        return y
