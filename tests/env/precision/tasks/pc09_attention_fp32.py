"""Scaled dot-product attention, fp32: softmax(Q K^T / sqrt(d)) V, (B, H, S, d). Input scaling is on:
at s = 100 the logits are ~1e4 * |q.k| / sqrt(d), so a softmax without the max subtraction
overflows, and the logits' own fp32 rounding makes the reference's error large."""
import math
import os

import torch
import torch.nn as nn

SMALL = os.environ.get("DRKERNEL_TASK_SIZE", "full") == "small"

B, H, S, Dh = (1, 2, 48, 32) if SMALL else (8, 16, 2048, 64)


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, q, k, v):
        att = (q @ k.transpose(-1, -2)) * (1.0 / math.sqrt(q.shape[-1]))
        return torch.softmax(att, dim=-1) @ v


def get_inputs():
    return [torch.randn(B, H, S, Dh), torch.randn(B, H, S, Dh), torch.randn(B, H, S, Dh)]


def get_init_inputs():
    return []
