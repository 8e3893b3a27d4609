"""Row standardization then tanh: y = tanh((x - mean(x)) / std(x)), unbiased std over the last dimension."""
import os

import torch
import torch.nn as nn

SMALL = os.environ.get("DRKERNEL_TASK_SIZE", "full") == "small"

if SMALL:
    num_rows, num_cols = 40, 100
else:
    num_rows, num_cols = 16384, 4096


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        mean = x.mean(dim=-1, keepdim=True)
        std = x.std(dim=-1, keepdim=True)
        return torch.tanh((x - mean) / std)


def get_inputs():
    # A per-row offset and spread so that the normalization is not a no-op.
    x = torch.randn(num_rows, num_cols)
    return [x * (0.5 + torch.rand(num_rows, 1) * 2.0) + torch.randn(num_rows, 1) * 3.0]


def get_init_inputs():
    return []
