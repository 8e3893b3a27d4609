"""Residual add followed by LayerNorm over the last dimension: y = layer_norm(x + residual) * weight + bias."""
import os

import torch
import torch.nn as nn

SMALL = os.environ.get("DRKERNEL_TASK_SIZE", "full") == "small"

if SMALL:
    num_rows, hidden_size = 37, 200
else:
    num_rows, hidden_size = 8192, 4096
eps = 1e-5


class Model(nn.Module):
    def __init__(self, hidden_size, eps):
        super().__init__()
        self.norm = nn.LayerNorm(hidden_size, eps=eps)
        # Non-trivial affine parameters, so that an implementation ignoring them fails.
        with torch.no_grad():
            self.norm.weight.copy_(1.0 + 0.5 * torch.randn(hidden_size))
            self.norm.bias.copy_(0.5 * torch.randn(hidden_size))

    def forward(self, x, residual):
        return self.norm(x + residual)


def get_inputs():
    return [torch.randn(num_rows, hidden_size), torch.randn(num_rows, hidden_size)]


def get_init_inputs():
    return [hidden_size, eps]
