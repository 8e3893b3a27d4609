"""Causal-masked softmax of attention scores: softmax(masked_fill(x * scale, j > i, -inf), dim=-1)."""
import os

import torch
import torch.nn as nn

SMALL = os.environ.get("DRKERNEL_TASK_SIZE", "full") == "small"

if SMALL:
    batch_size, num_heads, seq_len = 2, 2, 40
else:
    batch_size, num_heads, seq_len = 4, 16, 1024
scale = 0.5


class Model(nn.Module):
    def __init__(self, seq_len, scale):
        super().__init__()
        self.scale = scale
        self.register_buffer("mask", torch.tril(torch.ones(seq_len, seq_len)).view(1, 1, seq_len, seq_len))

    def forward(self, x):
        s = x.size(-1)
        x = x * self.scale
        x = x.masked_fill(self.mask[:, :, :s, :s] == 0, float("-inf"))
        return torch.softmax(x, dim=-1)


def get_inputs():
    return [torch.randn(batch_size, num_heads, seq_len, seq_len)]


def get_init_inputs():
    return [seq_len, scale]
