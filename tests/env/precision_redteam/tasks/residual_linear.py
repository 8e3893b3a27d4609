"""Residual stream update: y = h + linear(x), where the residual stream h is large (|h| ~ 1000, as in
a deep un-normalised residual stream) and the branch linear(x) is O(1)."""
import os

import torch
import torch.nn as nn

SMALL = os.environ.get("DRKERNEL_TASK_SIZE", "full") == "small"

if SMALL:
    batch_size, in_features, out_features = 40, 64, 48
else:
    batch_size, in_features, out_features = 8192, 4096, 4096


class Model(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, h, x):
        return h + self.linear(x)


def get_inputs():
    return [torch.randn(batch_size, out_features) * 1000.0, torch.randn(batch_size, in_features)]


def get_init_inputs():
    return [in_features, out_features]
