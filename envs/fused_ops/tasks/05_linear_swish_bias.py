"""Linear, Swish (x * sigmoid(x)), then add a learned per-feature bias: y = swish(linear(x)) + bias."""
import os

import torch
import torch.nn as nn

SMALL = os.environ.get("DRKERNEL_TASK_SIZE", "full") == "small"

if SMALL:
    batch_size, in_features, out_features = 32, 48, 65
else:
    batch_size, in_features, out_features = 4096, 4096, 4096


class Model(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)
        self.bias = nn.Parameter(torch.randn(out_features) * 0.5)

    def forward(self, x):
        x = self.linear(x)
        x = x * torch.sigmoid(x)
        return x + self.bias


def get_inputs():
    return [torch.randn(batch_size, in_features)]


def get_init_inputs():
    return [in_features, out_features]
