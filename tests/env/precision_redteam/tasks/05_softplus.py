"""Softplus: out = log(1 + exp(x)) (PyTorch returns x where x > 20), elementwise."""
import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = os.environ.get("DRKERNEL_TASK_SIZE", "full") == "small"

batch_size = 7 if SMALL else 4096
dim = 585 if SMALL else 16384


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.softplus(x)


def get_inputs():
    # std 3 so that a good share of elements lies past both the linear and the exp-decay regimes.
    return [torch.randn(batch_size, dim) * 3.0]


def get_init_inputs():
    return []
