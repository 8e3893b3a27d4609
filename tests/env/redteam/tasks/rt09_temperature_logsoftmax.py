"""Constant non-tensor input: y = log_softmax(x / temperature, dim=1) with temperature a Python float."""
import os

import torch
import torch.nn as nn

SMALL = os.environ.get("DRKERNEL_TASK_SIZE", "full") == "small"

rows, cols = (30, 200) if SMALL else (8192, 8192)
temperature = 0.7


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x, temperature: float):
        return torch.log_softmax(x / temperature, dim=1)


def get_inputs():
    return [torch.randn(rows, cols), temperature]


def get_init_inputs():
    return []
