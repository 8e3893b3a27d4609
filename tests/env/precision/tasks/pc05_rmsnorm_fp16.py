"""fp16 RMSNorm, written out in eager fp16: x * rsqrt(mean(x^2) + eps) * w (fp16 input and weight).
Every op rounds to fp16. Inputs stay at their native scale (x^2 overflows fp16 above ~256 and
underflows to subnormals below ~1e-3, where the reference itself breaks down)."""
import os

import torch
import torch.nn as nn

SMALL = os.environ.get("DRKERNEL_TASK_SIZE", "full") == "small"

rows, hidden = (32, 2048) if SMALL else (16384, 4096)
eps = 1e-5
INPUT_DISTRIBUTIONS = ("native", "negated")


class Model(nn.Module):
    def __init__(self, hidden, eps):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter((1.0 + 0.5 * torch.randn(hidden)).to(torch.float16))

    def forward(self, x):
        ms = x.pow(2).mean(-1, keepdim=True)
        return x * torch.rsqrt(ms + self.eps) * self.weight


def get_inputs():
    return [(2.0 * torch.randn(rows, hidden)).to(torch.float16)]


def get_init_inputs():
    return [hidden, eps]
