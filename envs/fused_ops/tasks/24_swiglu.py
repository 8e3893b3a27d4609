"""SwiGLU activation of a fused gate/up projection output: y = silu(x[:, :H]) * x[:, H:]."""
import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = os.environ.get("DRKERNEL_TASK_SIZE", "full") == "small"

if SMALL:
    num_tokens, hidden = 30, 70
else:
    num_tokens, hidden = 8192, 4096


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        gate, up = x.chunk(2, dim=-1)
        return F.silu(gate) * up


def get_inputs():
    return [torch.randn(num_tokens, 2 * hidden) * 2.0]


def get_init_inputs():
    return []
