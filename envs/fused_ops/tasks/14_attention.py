"""Scaled dot-product attention, written out: softmax(Q @ K^T * scale) @ V, head_dim 64."""
import math
import os

import torch
import torch.nn as nn

SMALL = os.environ.get("DRKERNEL_TASK_SIZE", "full") == "small"

if SMALL:
    batch_size, num_heads, seq_len, head_dim = 2, 2, 40, 16
else:
    batch_size, num_heads, seq_len, head_dim = 8, 16, 1024, 64


class Model(nn.Module):
    def __init__(self, head_dim):
        super().__init__()
        self.scale = 1.0 / math.sqrt(head_dim)

    def forward(self, q, k, v):
        scores = torch.matmul(q, k.transpose(-2, -1)) * self.scale
        probs = torch.softmax(scores, dim=-1)
        return torch.matmul(probs, v)


def get_inputs():
    shape = (batch_size, num_heads, seq_len, head_dim)
    return [torch.randn(shape), torch.randn(shape), torch.randn(shape)]


def get_init_inputs():
    return [head_dim]
