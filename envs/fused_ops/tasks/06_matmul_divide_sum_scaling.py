"""Linear, divide by a constant, sum over features, scale: y = (linear(x) / divisor).sum(dim=1, keepdim=True) * scale."""
import os

import torch
import torch.nn as nn

SMALL = os.environ.get("DRKERNEL_TASK_SIZE", "full") == "small"

if SMALL:
    batch_size, in_features, hidden_size = 40, 72, 56
else:
    batch_size, in_features, hidden_size = 8192, 8192, 4096
divisor, scaling_factor = 2.0, 1.5


class Model(nn.Module):
    def __init__(self, in_features, hidden_size, divisor, scaling_factor):
        super().__init__()
        self.linear = nn.Linear(in_features, hidden_size)
        self.divisor = divisor
        self.scaling_factor = scaling_factor

    def forward(self, x):
        x = self.linear(x)
        x = x / self.divisor
        x = torch.sum(x, dim=1, keepdim=True)
        return x * self.scaling_factor


def get_inputs():
    return [torch.randn(batch_size, in_features)]


def get_init_inputs():
    return [in_features, hidden_size, divisor, scaling_factor]
