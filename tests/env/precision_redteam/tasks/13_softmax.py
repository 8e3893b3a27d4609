"""Row-wise softmax over the last dimension of a (B, N) tensor."""
import os

import torch
import torch.nn as nn

SMALL = os.environ.get("DRKERNEL_TASK_SIZE", "full") == "small"

batch_size = 13 if SMALL else 16384
dim = 300 if SMALL else 2048


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.softmax(x, dim=-1)


def get_inputs():
    # Logits with std 2: rows are peaked enough that outputs are not all ~1/N.
    return [torch.randn(batch_size, dim) * 2.0]


def get_init_inputs():
    return []
