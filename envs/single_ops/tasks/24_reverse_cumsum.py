"""Reverse (suffix) cumulative sum along the last dimension: out[:, j] = sum(x[:, j:])."""
import os

import torch
import torch.nn as nn

SMALL = os.environ.get("DRKERNEL_TASK_SIZE", "full") == "small"

batch_size = 6 if SMALL else 8192
dim = 555 if SMALL else 4096


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cumsum(x.flip(1), dim=1).flip(1)


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return []
