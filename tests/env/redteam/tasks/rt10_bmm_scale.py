"""Batched matrix product without parameters, scaled: y = (A @ B) * 0.5, A (b, m, k), B (b, k, n)."""
import os

import torch
import torch.nn as nn

SMALL = os.environ.get("DRKERNEL_TASK_SIZE", "full") == "small"

batch, m, k, n = (3, 40, 48, 36) if SMALL else (32, 1024, 1024, 1024)


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, a, b):
        return torch.bmm(a, b) * 0.5


def get_inputs():
    return [torch.randn(batch, m, k), torch.randn(batch, k, n)]


def get_init_inputs():
    return []
