"""Post-norm block output: y = layer_norm(linear(x) + residual) over the last dimension."""
import os

import torch
import torch.nn as nn

SMALL = os.environ.get("DRKERNEL_TASK_SIZE", "full") == "small"

if SMALL:
    batch_size, in_features, hidden_size = 40, 48, 80
else:
    batch_size, in_features, hidden_size = 8192, 2048, 1024
eps = 1e-5


class Model(nn.Module):
    def __init__(self, in_features, hidden_size, eps):
        super().__init__()
        self.linear = nn.Linear(in_features, hidden_size)
        self.norm = nn.LayerNorm(hidden_size, eps=eps)
        # Non-trivial affine parameters, so that an implementation ignoring them fails.
        with torch.no_grad():
            self.norm.weight.copy_(1.0 + 0.5 * torch.randn(hidden_size))
            self.norm.bias.copy_(0.5 * torch.randn(hidden_size))

    def forward(self, x, residual):
        return self.norm(self.linear(x) + residual)


def get_inputs():
    return [torch.randn(batch_size, in_features), torch.randn(batch_size, hidden_size)]


def get_init_inputs():
    return [in_features, hidden_size, eps]
