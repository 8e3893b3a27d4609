"""Column gather: out = torch.index_select(x, 1, idx) with x (R, N) and int64 idx (K,) (repeats allowed)."""
import os

import torch
import torch.nn as nn

SMALL = os.environ.get("DRKERNEL_TASK_SIZE", "full") == "small"

rows = 9 if SMALL else 8192
cols = 100 if SMALL else 8192
num_index = 77 if SMALL else 4096


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
        return torch.index_select(x, 1, idx)


def get_inputs():
    return [torch.randn(rows, cols), torch.randint(0, cols, (num_index,), dtype=torch.int64)]


def get_init_inputs():
    return []
