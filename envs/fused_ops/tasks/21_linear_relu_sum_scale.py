"""Linear, ReLU, sum over the feature dimension, scale: y = relu(linear(x)).sum(dim=1, keepdim=True) * scale."""
import os

import torch
import torch.nn as nn

SMALL = os.environ.get("DRKERNEL_TASK_SIZE", "full") == "small"

if SMALL:
    batch_size, in_features, out_features = 45, 56, 70
else:
    batch_size, in_features, out_features = 8192, 4096, 2048
scaling_factor = 0.5


class Model(nn.Module):
    def __init__(self, in_features, out_features, scaling_factor):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)
        self.scaling_factor = scaling_factor

    def forward(self, x):
        x = torch.relu(self.linear(x))
        return torch.sum(x, dim=1, keepdim=True) * self.scaling_factor


def get_inputs():
    return [torch.randn(batch_size, in_features)]


def get_init_inputs():
    return [in_features, out_features, scaling_factor]
