"""Argmax over the last dimension (greedy pick over a vocabulary): (B, V) -> (B,) int64."""
import os

import torch
import torch.nn as nn

SMALL = os.environ.get("DRKERNEL_TASK_SIZE", "full") == "small"

batch_size = 9 if SMALL else 2048
vocab = 1000 if SMALL else 32000


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.argmax(x, dim=-1)


def get_inputs():
    return [torch.randn(batch_size, vocab)]


def get_init_inputs():
    return []
