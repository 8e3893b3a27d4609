"""(Red-team corpus: a copy of a bundled envs task.) 2-D transpose materialized contiguously: (M, N) -> (N, M)."""
import os

import torch
import torch.nn as nn

SMALL = os.environ.get("DRKERNEL_TASK_SIZE", "full") == "small"

M = 33 if SMALL else 8192
N = 70 if SMALL else 6144


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.t().contiguous()


def get_inputs():
    return [torch.randn(M, N)]


def get_init_inputs():
    return []
