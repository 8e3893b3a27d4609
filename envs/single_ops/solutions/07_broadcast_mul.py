"""Per-channel broadcast multiply: one program per (n, c) plane block, the channel scale loaded once."""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _channel_mul_kernel(x_ptr, s_ptr, out_ptr, C, HW, BLOCK: tl.constexpr):
    plane = tl.program_id(0)          # n * C + c
    blk = tl.program_id(1)
    c = plane % C
    s = tl.load(s_ptr + c)
    offs = blk * BLOCK + tl.arange(0, BLOCK)
    mask = offs < HW
    base = plane * HW
    x = tl.load(x_ptr + base + offs, mask=mask, other=0.0)
    tl.store(out_ptr + base + offs, x * s, mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        Nb, C, H, W = x.shape
        s = scale.reshape(C).contiguous()
        out = torch.empty_like(x)
        HW = H * W
        BLOCK = min(1024, triton.next_power_of_2(HW))
        grid = (Nb * C, triton.cdiv(HW, BLOCK))
        _channel_mul_kernel[grid](x, s, out, C, HW, BLOCK=BLOCK, num_warps=4)
        return out
