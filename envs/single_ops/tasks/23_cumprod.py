"""Inclusive prefix product along the last dimension: out[:, j] = prod(x[:, :j+1])."""
import os

import torch
import torch.nn as nn

SMALL = os.environ.get("DRKERNEL_TASK_SIZE", "full") == "small"

batch_size = 5 if SMALL else 8192
dim = 700 if SMALL else 2048

# Factors near 1 (1 + 0.05*randn) keep the running products in a sane range over the whole row;
# scaling them by up to 100 would overflow fp32 within a few dozen steps, so no "scaled" trials.
INPUT_DISTRIBUTIONS = ("native", "negated")


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cumprod(x, dim=1)


def get_inputs():
    return [1.0 + 0.05 * torch.randn(batch_size, dim)]


def get_init_inputs():
    return []
