"""Broadcast multiply: x (N, C, H, W) * scale (1, C, 1, 1), a per-channel scale."""
import os

import torch
import torch.nn as nn

SMALL = os.environ.get("DRKERNEL_TASK_SIZE", "full") == "small"

batch_size = 2 if SMALL else 32
channels = 3 if SMALL else 128
height = 17 if SMALL else 128
width = 19 if SMALL else 128


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
        return x * scale


def get_inputs():
    return [torch.randn(batch_size, channels, height, width), torch.randn(1, channels, 1, 1)]


def get_init_inputs():
    return []
