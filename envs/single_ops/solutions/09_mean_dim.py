"""Mean over the last dim: one program per row, vector fp32 accumulator, one final tree reduction."""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _row_mean_kernel(x_ptr, out_ptr, D, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    base = x_ptr + row * D
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    for i in range(0, tl.cdiv(D, BLOCK)):
        offs = i * BLOCK + tl.arange(0, BLOCK)
        acc += tl.load(base + offs, mask=offs < D, other=0.0)
    tl.store(out_ptr + row, tl.sum(acc, axis=0) / D)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        D = x.shape[-1]
        rows = x.numel() // D
        out = torch.empty(x.shape[:-1], device=x.device, dtype=x.dtype)
        BLOCK = min(2048, triton.next_power_of_2(D))
        _row_mean_kernel[(rows,)](x, out, D, BLOCK=BLOCK, num_warps=8 if BLOCK >= 2048 else 4)
        return out
