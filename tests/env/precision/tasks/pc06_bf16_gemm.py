"""bf16 GEMM: C = A @ B, A (M, K), B (K, N) bf16, bf16 out. cuBLAS (and PyTorch's CPU kernel)
accumulates in fp32 and rounds once to bf16; K is long enough that a bf16 accumulator is visibly
worse than that single rounding."""
import os

import torch
import torch.nn as nn

SMALL = os.environ.get("DRKERNEL_TASK_SIZE", "full") == "small"

M, K, N = (32, 4096, 48) if SMALL else (8192, 8192, 8192)


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, A, B):
        return torch.matmul(A, B)


def get_inputs():
    return [torch.randn(M, K).to(torch.bfloat16), torch.randn(K, N).to(torch.bfloat16)]


def get_init_inputs():
    return []
