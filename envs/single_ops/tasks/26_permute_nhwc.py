"""Permute NCHW -> NHWC and materialize contiguously: (B, C, H, W) -> (B, H, W, C)."""
import os

import torch
import torch.nn as nn

SMALL = os.environ.get("DRKERNEL_TASK_SIZE", "full") == "small"

batch_size = 2 if SMALL else 32
channels = 5 if SMALL else 256
height = 6 if SMALL else 64
width = 7 if SMALL else 64


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.permute(0, 2, 3, 1).contiguous()


def get_inputs():
    return [torch.randn(batch_size, channels, height, width)]


def get_init_inputs():
    return []
