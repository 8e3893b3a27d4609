"""Inclusive cumprod along the last dim: one program per row scans BLOCK-wide chunks with tl.cumprod and
carries the running product (the chunk's last lane; padding lanes load 1.0) into the next chunk."""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _cumprod_kernel(x_ptr, out_ptr, N, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    base = row * N
    lane = tl.arange(0, BLOCK)
    carry = tl.full([BLOCK], 1.0, dtype=tl.float32)   # running product, broadcast across lanes
    for i in range(0, tl.cdiv(N, BLOCK)):
        offs = i * BLOCK + lane
        mask = offs < N
        x = tl.load(x_ptr + base + offs, mask=mask, other=1.0)
        cp = tl.cumprod(x, axis=0) * carry
        tl.store(out_ptr + base + offs, cp, mask=mask)
        carry = tl.zeros([BLOCK], dtype=tl.float32) + tl.sum(tl.where(lane == BLOCK - 1, cp, 0.0), axis=0)


def _block(n):
    # at least two chunks per row whenever the row is longer than 128, so the carry path always runs
    return min(1024, max(128, triton.next_power_of_2(n) // 4))


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        rows, N = x.shape
        out = torch.empty_like(x)
        _cumprod_kernel[(rows,)](x, out, N, BLOCK=_block(N), num_warps=4)
        return out
