"""Fake-quantised linear on a fine grid (step 0.01): y = round(linear(x) / step) * step (an int grid of width `step`)."""
import os

import torch
import torch.nn as nn

SMALL = os.environ.get("DRKERNEL_TASK_SIZE", "full") == "small"

if SMALL:
    batch_size, in_features, out_features = 48, 64, 72
else:
    batch_size, in_features, out_features = 8192, 4096, 4096
step = 0.01


class Model(nn.Module):
    def __init__(self, in_features, out_features, step):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)
        self.step = step

    def forward(self, x):
        return torch.round(self.linear(x) / self.step) * self.step


def get_inputs():
    return [torch.randn(batch_size, in_features)]


def get_init_inputs():
    return [in_features, out_features, step]
