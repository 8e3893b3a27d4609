"""Softmax over the channel dimension (dim=1) of a (batch, channels, length) tensor, times a gate: y = softmax(x, dim=1) * g."""
import os

import torch
import torch.nn as nn

SMALL = os.environ.get("DRKERNEL_TASK_SIZE", "full") == "small"

if SMALL:
    batch_size, channels, length = 2, 12, 100
else:
    batch_size, channels, length = 128, 64, 4096


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x, g):
        return torch.softmax(x, dim=1) * g


def get_inputs():
    shape = (batch_size, channels, length)
    return [torch.randn(shape) * 2.0, torch.randn(shape)]


def get_init_inputs():
    return []
