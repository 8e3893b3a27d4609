"""(Red-team corpus: a copy of envs/fused_ops/tasks/02_linear_gelu_scale.py.) Linear followed by exact (erf) GELU and a constant scale: y = gelu(linear(x)) * scaling_factor."""
import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = os.environ.get("DRKERNEL_TASK_SIZE", "full") == "small"

if SMALL:
    batch_size, in_features, out_features = 33, 64, 80
else:
    batch_size, in_features, out_features = 4096, 4096, 8192
scaling_factor = 1.5


class Model(nn.Module):
    def __init__(self, in_features, out_features, scaling_factor):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)
        self.scaling_factor = scaling_factor

    def forward(self, x):
        return F.gelu(self.linear(x)) * self.scaling_factor


def get_inputs():
    return [torch.randn(batch_size, in_features)]


def get_init_inputs():
    return [in_features, out_features, scaling_factor]
