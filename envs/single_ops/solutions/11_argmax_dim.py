"""Argmax over the last dim: one program per row keeps a per-lane running (max, index) pair
(strict > so the earliest index wins ties, as torch does), then picks the smallest index holding
the row max."""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _row_argmax_kernel(x_ptr, out_ptr, D, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    base = x_ptr + row * D
    best_v = tl.full([BLOCK], float("-inf"), dtype=tl.float32)
    best_i = tl.zeros([BLOCK], dtype=tl.int32)
    for i in range(0, tl.cdiv(D, BLOCK)):
        offs = i * BLOCK + tl.arange(0, BLOCK)
        v = tl.load(base + offs, mask=offs < D, other=float("-inf"))
        upd = v > best_v
        best_v = tl.where(upd, v, best_v)
        best_i = tl.where(upd, offs, best_i)
    m = tl.max(best_v, axis=0)
    idx = tl.min(tl.where(best_v == m, best_i, 2147483647), axis=0)
    tl.store(out_ptr + row, idx.to(tl.int64))


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        D = x.shape[-1]
        rows = x.numel() // D
        out = torch.empty(x.shape[:-1], device=x.device, dtype=torch.int64)
        BLOCK = min(2048, triton.next_power_of_2(D))
        _row_argmax_kernel[(rows,)](x, out, D, BLOCK=BLOCK, num_warps=8 if BLOCK >= 2048 else 4)
        return out
