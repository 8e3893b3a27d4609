"""Linear followed by a max over the feature dimension: y = linear(x).max(dim=1, keepdim=True).values."""
import os

import torch
import torch.nn as nn

SMALL = os.environ.get("DRKERNEL_TASK_SIZE", "full") == "small"

if SMALL:
    batch_size, in_features, out_features = 40, 64, 90
else:
    batch_size, in_features, out_features = 8192, 4096, 4096


class Model(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x):
        return torch.max(self.linear(x), dim=1, keepdim=True).values


def get_inputs():
    return [torch.randn(batch_size, in_features)]


def get_init_inputs():
    return [in_features, out_features]
