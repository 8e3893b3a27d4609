"""Mean reduction over the last dimension: (B, D) -> (B,)."""
import os

import torch
import torch.nn as nn

SMALL = os.environ.get("DRKERNEL_TASK_SIZE", "full") == "small"

batch_size = 13 if SMALL else 16384
dim = 300 if SMALL else 4096


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.mean(x, dim=-1)


def get_inputs():
    # A per-row offset keeps the row means well away from zero (plain randn rows average to ~1/sqrt(D)).
    return [torch.randn(batch_size, dim) + torch.randn(batch_size, 1)]


def get_init_inputs():
    return []
