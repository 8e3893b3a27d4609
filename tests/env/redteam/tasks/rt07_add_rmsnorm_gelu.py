"""Fused pattern: h = x + residual; y = gelu_erf(rmsnorm(h) * weight) with a learned weight."""
import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = os.environ.get("DRKERNEL_TASK_SIZE", "full") == "small"

rows, hidden = (37, 160) if SMALL else (16384, 4096)
eps = 1e-6


class Model(nn.Module):
    def __init__(self, hidden, eps):
        super().__init__()
        self.weight = nn.Parameter(1.0 + 0.5 * torch.randn(hidden))
        self.eps = eps

    def forward(self, x, residual):
        h = x + residual
        h = h * torch.rsqrt(h.pow(2).mean(dim=-1, keepdim=True) + self.eps) * self.weight
        return F.gelu(h)


def get_inputs():
    return [torch.randn(rows, hidden), torch.randn(rows, hidden)]


def get_init_inputs():
    return [hidden, eps]
