"""Wrong: log-softmax without the max subtraction (log(sum(exp(x))) straight): fine for moderate
logits, inf/NaN once the inputs are scaled up (x > ~88 overflows fp32's exp)."""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _log_softmax_kernel(x_ptr, y_ptr, N, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    offs = tl.arange(0, BLOCK)
    mask = offs < N
    x = tl.load(x_ptr + row * N + offs, mask=mask, other=float("-inf")).to(tl.float32)
    z = x
    lse = tl.log(tl.sum(tl.exp(z), axis=0))
    tl.store(y_ptr + row * N + offs, (z - lse).to(tl.bfloat16), mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        x = x.contiguous()
        N = x.shape[-1]
        R = x.numel() // N
        y = torch.empty_like(x)
        BLOCK = triton.next_power_of_2(N)
        _log_softmax_kernel[(R,)](x, y, N, BLOCK=BLOCK, num_warps=8 if BLOCK >= 2048 else 4)
        return y
