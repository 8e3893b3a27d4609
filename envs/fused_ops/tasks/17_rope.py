"""Rotary position embedding (rotate-half form) applied to (batch, heads, seq, head_dim): y = x * cos + rotate_half(x) * sin."""
import os

import torch
import torch.nn as nn

SMALL = os.environ.get("DRKERNEL_TASK_SIZE", "full") == "small"

if SMALL:
    batch_size, num_heads, seq_len, head_dim = 2, 3, 20, 32
else:
    batch_size, num_heads, seq_len, head_dim = 16, 32, 1024, 128
base = 10000.0


class Model(nn.Module):
    def __init__(self, seq_len, head_dim, base):
        super().__init__()
        inv_freq = 1.0 / (base ** (torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim))
        t = torch.arange(seq_len, dtype=torch.float32)
        freqs = torch.outer(t, inv_freq)
        emb = torch.cat((freqs, freqs), dim=-1)
        self.register_buffer("cos_cached", emb.cos())
        self.register_buffer("sin_cached", emb.sin())

    @staticmethod
    def rotate_half(x):
        x1, x2 = x.chunk(2, dim=-1)
        return torch.cat((-x2, x1), dim=-1)

    def forward(self, x):
        s = x.size(-2)
        cos = self.cos_cached[:s]
        sin = self.sin_cached[:s]
        return x * cos + self.rotate_half(x) * sin


def get_inputs():
    return [torch.randn(batch_size, num_heads, seq_len, head_dim)]


def get_init_inputs():
    return [seq_len, head_dim, base]
