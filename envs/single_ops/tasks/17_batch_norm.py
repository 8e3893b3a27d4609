"""BatchNorm2d with batch statistics (normalize each channel over N, H, W; biased variance) and affine params."""
import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = os.environ.get("DRKERNEL_TASK_SIZE", "full") == "small"

batch_size = 3 if SMALL else 32
channels = 5 if SMALL else 64
height = 7 if SMALL else 128
width = 9 if SMALL else 128
eps = 1e-5


class Model(nn.Module):
    def __init__(self, channels: int, eps: float):
        super().__init__()
        self.eps = eps
        # Non-trivial affine parameters (nn.BatchNorm2d's ones/zeros init would let a kernel skip them).
        self.weight = nn.Parameter(1.0 + 0.5 * torch.randn(channels))
        self.bias = nn.Parameter(0.5 * torch.randn(channels))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # training=True with no running buffers: always normalizes with the statistics of this batch.
        return F.batch_norm(x, None, None, self.weight, self.bias, training=True, eps=self.eps)


def get_inputs():
    # Per-channel offsets and scales, so the per-channel statistics actually differ.
    c = channels
    return [torch.randn(batch_size, c, height, width) * (0.5 + torch.rand(1, c, 1, 1) * 2.0)
            + torch.randn(1, c, 1, 1)]


def get_init_inputs():
    return [channels, eps]
