"""Wrong: masks the sum but divides by the full sequence length. Devices: both."""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _masked_mean_kernel(x_ptr, m_ptr, y_ptr, S, D, BLOCK_S: tl.constexpr, BLOCK_D: tl.constexpr):
    b = tl.program_id(0)
    offs_d = tl.program_id(1) * BLOCK_D + tl.arange(0, BLOCK_D)
    md = offs_d < D
    acc = tl.zeros((BLOCK_D,), dtype=tl.float32)
    cnt = tl.zeros((BLOCK_S,), dtype=tl.float32)
    for s0 in range(0, S, BLOCK_S):
        offs_s = s0 + tl.arange(0, BLOCK_S)
        ms = offs_s < S
        keep = tl.load(m_ptr + b * S + offs_s, mask=ms, other=0).to(tl.float32)
        x = tl.load(x_ptr + b * S * D + offs_s[:, None] * D + offs_d[None, :],
                    mask=ms[:, None] & md[None, :], other=0.0)
        acc += tl.sum(x * keep[:, None], axis=0)
        cnt += keep
    denom = S * 1.0
    tl.store(y_ptr + b * D + offs_d, acc / denom, mask=md)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x, mask):
        x = x.contiguous()
        m = mask.contiguous().view(torch.uint8)
        B, S, D = x.shape
        y = torch.empty((B, D), device=x.device, dtype=x.dtype)
        BLOCK_D = min(128, triton.next_power_of_2(D))
        _masked_mean_kernel[(B, triton.cdiv(D, BLOCK_D))](x, m, y, S, D, BLOCK_S=16, BLOCK_D=BLOCK_D)
        return y
