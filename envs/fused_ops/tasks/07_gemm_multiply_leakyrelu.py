"""Linear, multiply by a constant, LeakyReLU: y = leaky_relu(linear(x) * multiplier, negative_slope)."""
import os

import torch
import torch.nn as nn

SMALL = os.environ.get("DRKERNEL_TASK_SIZE", "full") == "small"

if SMALL:
    batch_size, in_features, out_features = 36, 64, 50
else:
    batch_size, in_features, out_features = 4096, 8192, 4096
multiplier, negative_slope = 2.0, 0.1


class Model(nn.Module):
    def __init__(self, in_features, out_features, multiplier, negative_slope):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)
        self.multiplier = multiplier
        self.leaky_relu = nn.LeakyReLU(negative_slope)

    def forward(self, x):
        x = self.linear(x)
        x = x * self.multiplier
        return self.leaky_relu(x)


def get_inputs():
    return [torch.randn(batch_size, in_features)]


def get_init_inputs():
    return [in_features, out_features, multiplier, negative_slope]
