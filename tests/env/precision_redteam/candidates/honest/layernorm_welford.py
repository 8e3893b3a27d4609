"""LayerNorm with a chunked Welford/Chan mean and variance (64-wide chunks merged in order), as
stable as the two-pass form"""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _layer_norm_kernel(x_ptr, w_ptr, b_ptr, out_ptr, D, eps, BLOCK: tl.constexpr, CHUNK: tl.constexpr):
    row = tl.program_id(0)
    offs = tl.arange(0, BLOCK)
    mask = offs < D
    x = tl.load(x_ptr + row * D + offs, mask=mask, other=0.0)
    # Welford / Chan: per-chunk mean and M2, merged pairwise over CHUNK-wide slices
    mean = tl.zeros((), dtype=tl.float32)
    m2 = tl.zeros((), dtype=tl.float32)
    cnt = tl.zeros((), dtype=tl.float32)
    coffs = tl.arange(0, CHUNK)
    for c in range(0, tl.cdiv(D, CHUNK)):
        o = c * CHUNK + coffs
        cm = o < D
        xs = tl.load(x_ptr + row * D + o, mask=cm, other=0.0)
        n_b = tl.sum(cm.to(tl.float32), axis=0)
        mean_b = tl.sum(xs, axis=0) / n_b
        d_b = tl.where(cm, xs - mean_b, 0.0)
        m2_b = tl.sum(d_b * d_b, axis=0)
        n_ab = cnt + n_b
        delta = mean_b - mean
        mean = mean + delta * (n_b / n_ab)
        m2 = m2 + m2_b + delta * delta * (cnt * n_b / n_ab)
        cnt = n_ab
    var = m2 / D
    xc = tl.where(mask, x - mean, 0.0)
    rstd = 1.0 / tl.sqrt(var + eps)
    w = tl.load(w_ptr + offs, mask=mask, other=0.0)
    b = tl.load(b_ptr + offs, mask=mask, other=0.0)
    tl.store(out_ptr + row * D + offs, xc * rstd * w + b, mask=mask)


class ModelNew(nn.Module):
    def __init__(self, hidden: int, eps: float):
        super().__init__()
        self.hidden = hidden
        self.eps = eps
        self.weight = nn.Parameter(1.0 + 0.5 * torch.randn(hidden))
        self.bias = nn.Parameter(0.5 * torch.randn(hidden))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        D = self.hidden
        rows = x.numel() // D
        out = torch.empty_like(x)
        BLOCK = triton.next_power_of_2(D)
        num_warps = 8 if BLOCK >= 2048 else 4
        _layer_norm_kernel[(rows,)](x, self.weight, self.bias, out, D, self.eps,
                                    BLOCK=BLOCK, CHUNK=64, num_warps=num_warps)
        return out
