"""Softmax over the last dim with an attention mask passed as a boolean input (False = masked out):
y = softmax(x.masked_fill(~mask, -inf), -1). get_inputs() builds a causal mask; every row keeps its diagonal."""
import os

import torch
import torch.nn as nn

SMALL = os.environ.get("DRKERNEL_TASK_SIZE", "full") == "small"

batch, heads, seq = (2, 3, 24) if SMALL else (8, 16, 1024)


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x, mask):
        return torch.softmax(x.masked_fill(~mask, float("-inf")), dim=-1)


def get_inputs():
    x = torch.randn(batch, heads, seq, seq)
    mask = torch.tril(torch.ones(seq, seq, dtype=torch.bool))
    return [x, mask]


def get_init_inputs():
    return []
