"""Online softmax (running max and rescaled sum over 64-wide chunks, then a normalising pass that
multiplies by the reciprocal of the sum): honest, two roundings at the end instead of one division."""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _softmax_kernel(x_ptr, out_ptr, N, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    offs = tl.arange(0, BLOCK)
    m = tl.full((), float("-inf"), tl.float32)
    s = tl.zeros((), dtype=tl.float32)
    for c in range(0, tl.cdiv(N, BLOCK)):
        o = c * BLOCK + offs
        x = tl.load(x_ptr + row * N + o, mask=o < N, other=float("-inf"))
        m_new = tl.maximum(m, tl.max(x, axis=0))
        s = s * tl.exp(m - m_new) + tl.sum(tl.exp(x - m_new), axis=0)
        m = m_new
    inv = 1.0 / s
    for c in range(0, tl.cdiv(N, BLOCK)):
        o = c * BLOCK + offs
        x = tl.load(x_ptr + row * N + o, mask=o < N, other=float("-inf"))
        tl.store(out_ptr + row * N + o, tl.exp(x - m) * inv, mask=o < N)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        N = x.shape[-1]
        rows = x.numel() // N
        out = torch.empty_like(x)
        BLOCK = 64  # chunks: online max/sum, then a second pass
        _softmax_kernel[(rows,)](x, out, N, BLOCK=BLOCK, num_warps=4)
        return out
