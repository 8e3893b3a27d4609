"""LayerNorm over the last dim, fp32, with affine parameters. The rows carry an offset (mean ~6, std
~1), so a one-pass variance E[x^2] - E[x]^2 cancels; at input scale 1e-2 the variance (~1e-4) is
within a factor 10 of eps, so eps must sit inside the square root."""
import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = os.environ.get("DRKERNEL_TASK_SIZE", "full") == "small"

rows, hidden = (48, 384) if SMALL else (16384, 4096)
eps = 1e-5


class Model(nn.Module):
    def __init__(self, hidden, eps):
        super().__init__()
        self.hidden = hidden
        self.eps = eps
        self.weight = nn.Parameter(1.0 + 0.5 * torch.randn(hidden))
        self.bias = nn.Parameter(0.5 * torch.randn(hidden))

    def forward(self, x):
        return F.layer_norm(x, (self.hidden,), self.weight, self.bias, self.eps)


def get_inputs():
    return [torch.randn(rows, hidden) + 6.0]


def get_init_inputs():
    return [hidden, eps]
