"""Pre-norm projection: RMSNorm with a learned weight, then Linear: y = linear(x * rsqrt(mean(x^2) + eps) * weight)."""
import os

import torch
import torch.nn as nn

SMALL = os.environ.get("DRKERNEL_TASK_SIZE", "full") == "small"

if SMALL:
    batch_size, in_features, out_features = 40, 72, 48
else:
    batch_size, in_features, out_features = 8192, 4096, 4096
eps = 1e-6


class Model(nn.Module):
    def __init__(self, in_features, out_features, eps):
        super().__init__()
        self.norm_weight = nn.Parameter(1.0 + 0.5 * torch.randn(in_features))
        self.linear = nn.Linear(in_features, out_features)
        self.eps = eps

    def forward(self, x):
        rms_inv = torch.rsqrt(x.pow(2).mean(dim=-1, keepdim=True) + self.eps)
        return self.linear(x * rms_inv * self.norm_weight)


def get_inputs():
    return [torch.randn(batch_size, in_features)]


def get_init_inputs():
    return [in_features, out_features, eps]
