"""Batched matrix multiplication: C[b] = A[b] @ B[b], A (B, M, K), B (B, K, N)."""
import os

import torch
import torch.nn as nn

SMALL = os.environ.get("DRKERNEL_TASK_SIZE", "full") == "small"

batch_size = 3 if SMALL else 32
M = 33 if SMALL else 512
K = 40 if SMALL else 1024
N = 50 if SMALL else 768


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, A: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
        return torch.bmm(A, B)


def get_inputs():
    return [torch.randn(batch_size, M, K), torch.randn(batch_size, K, N)]


def get_init_inputs():
    return []
