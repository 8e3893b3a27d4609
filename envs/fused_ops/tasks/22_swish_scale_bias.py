"""Elementwise chain: y = x * sigmoid(x) * scale + bias, with a learned per-column bias."""
import os

import torch
import torch.nn as nn

SMALL = os.environ.get("DRKERNEL_TASK_SIZE", "full") == "small"

if SMALL:
    num_rows, num_cols = 33, 130
else:
    num_rows, num_cols = 8192, 8192
scaling_factor = 2.0


class Model(nn.Module):
    def __init__(self, num_cols, scaling_factor):
        super().__init__()
        self.bias = nn.Parameter(torch.randn(num_cols) * 0.5)
        self.scaling_factor = scaling_factor

    def forward(self, x):
        return x * torch.sigmoid(x) * self.scaling_factor + self.bias


def get_inputs():
    return [torch.randn(num_rows, num_cols)]


def get_init_inputs():
    return [num_cols, scaling_factor]
