"""Linear, multiply by a scale, add a residual tensor, clamp: y = clamp(linear(x) * scale + residual, lo, hi)."""
import os

import torch
import torch.nn as nn

SMALL = os.environ.get("DRKERNEL_TASK_SIZE", "full") == "small"

if SMALL:
    batch_size, in_features, out_features = 48, 40, 72
else:
    batch_size, in_features, out_features = 8192, 2048, 4096
scale, clamp_min, clamp_max = 2.0, -2.0, 2.0


class Model(nn.Module):
    def __init__(self, in_features, out_features, scale, clamp_min, clamp_max):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)
        self.scale = scale
        self.clamp_min = clamp_min
        self.clamp_max = clamp_max

    def forward(self, x, residual):
        y = self.linear(x) * self.scale
        y = y + residual
        return torch.clamp(y, self.clamp_min, self.clamp_max)


def get_inputs():
    return [torch.randn(batch_size, in_features), torch.randn(batch_size, out_features)]


def get_init_inputs():
    return [in_features, out_features, scale, clamp_min, clamp_max]
