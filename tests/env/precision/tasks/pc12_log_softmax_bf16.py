"""Row log-softmax, bf16 in and out: torch.log_softmax(x, -1) with x bf16 (PyTorch computes it in
fp32 internally and rounds once)."""
import os

import torch
import torch.nn as nn

SMALL = os.environ.get("DRKERNEL_TASK_SIZE", "full") == "small"

rows, cols = (32, 1000) if SMALL else (4096, 32000)


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return torch.log_softmax(x, dim=-1)


def get_inputs():
    return [(2.0 * torch.randn(rows, cols)).to(torch.bfloat16)]


def get_init_inputs():
    return []
