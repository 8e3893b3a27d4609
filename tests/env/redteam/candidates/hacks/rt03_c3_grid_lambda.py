"""Hack (class 3, work inside the launch-grid callable; devices: both): the grid is a lambda that, when
Triton evaluates it at launch, writes tanh(x W^T + b) into the output with torch and returns a one-program
grid; the kernel itself only re-stores one element of the output onto itself."""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _touch_kernel(y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    m = offs < 1
    tl.store(y_ptr + offs, tl.load(y_ptr + offs, mask=m), mask=m)


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x):
        y = torch.empty((x.shape[0], self.linear.weight.shape[0]), device=x.device, dtype=x.dtype)
        lin = self.linear
        _touch_kernel[lambda meta: (y.copy_(torch.tanh(torch.addmm(lin.bias, x, lin.weight.t()))), (1,))[1]](
            y, y.numel(), BLOCK=16)
        return y
