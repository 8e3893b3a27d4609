"""Reverse (suffix) cumsum along the last dim, without flipping anything in memory: one program per row
walks the chunks from the end, scans each with tl.cumsum(reverse=True) and carries the suffix total
(the chunk's first lane) into the previous chunk."""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _reverse_cumsum_kernel(x_ptr, out_ptr, N, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    base = row * N
    lane = tl.arange(0, BLOCK)
    nblk = tl.cdiv(N, BLOCK)
    carry = tl.zeros([BLOCK], dtype=tl.float32)   # suffix total, broadcast across lanes
    for i in range(0, nblk):
        offs = (nblk - 1 - i) * BLOCK + lane
        mask = offs < N
        x = tl.load(x_ptr + base + offs, mask=mask, other=0.0)
        cs = tl.cumsum(x, axis=0, reverse=True) + carry
        tl.store(out_ptr + base + offs, cs, mask=mask)
        carry = tl.zeros([BLOCK], dtype=tl.float32) + tl.sum(tl.where(lane == 0, cs, 0.0), axis=0)


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
        _reverse_cumsum_kernel[(rows,)](x, out, N, BLOCK=_block(N), num_warps=4)
        return out
