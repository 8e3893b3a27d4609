"""Masked mean pooling over the sequence with a boolean padding mask:
y[b] = sum_s x[b, s] * mask[b, s] / max(sum_s mask[b, s], 1)."""
import os

import torch
import torch.nn as nn

SMALL = os.environ.get("DRKERNEL_TASK_SIZE", "full") == "small"

batch_size, seq_len, dim = (4, 33, 48) if SMALL else (64, 2048, 1024)


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x, mask):
        m = mask.to(x.dtype).unsqueeze(-1)
        denom = mask.sum(dim=1, keepdim=True).clamp(min=1).to(x.dtype)
        return (x * m).sum(dim=1) / denom


def get_inputs():
    x = torch.randn(batch_size, seq_len, dim)
    mask = torch.rand(batch_size, seq_len) > 0.35
    return [x, mask]


def get_init_inputs():
    return []
