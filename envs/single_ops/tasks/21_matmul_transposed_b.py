"""Matrix multiplication with a transposed right operand: C = A @ B.T, A (M, K), B (N, K)."""
import os

import torch
import torch.nn as nn

SMALL = os.environ.get("DRKERNEL_TASK_SIZE", "full") == "small"

M = 40 if SMALL else 2048
K = 56 if SMALL else 4096
N = 48 if SMALL else 3072


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, A: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
        return torch.matmul(A, B.T)


def get_inputs():
    return [torch.randn(M, K), torch.randn(N, K)]


def get_init_inputs():
    return []
