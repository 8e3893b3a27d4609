"""RMSNorm with a learned weight, then a residual add: y = x * rsqrt(mean(x^2) + eps) * weight + residual."""
import os

import torch
import torch.nn as nn

SMALL = os.environ.get("DRKERNEL_TASK_SIZE", "full") == "small"

if SMALL:
    num_rows, hidden_size = 33, 300
else:
    num_rows, hidden_size = 8192, 4096
eps = 1e-6


class Model(nn.Module):
    def __init__(self, hidden_size, eps):
        super().__init__()
        self.weight = nn.Parameter(1.0 + 0.5 * torch.randn(hidden_size))
        self.eps = eps

    def forward(self, x, residual):
        rms_inv = torch.rsqrt(x.pow(2).mean(dim=-1, keepdim=True) + self.eps)
        return x * rms_inv * self.weight + residual


def get_inputs():
    return [torch.randn(num_rows, hidden_size), torch.randn(num_rows, hidden_size)]


def get_init_inputs():
    return [hidden_size, eps]
