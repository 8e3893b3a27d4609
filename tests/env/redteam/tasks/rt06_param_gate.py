"""Parameters used only in a parameter-only sub-expression:
gate = softmax(logits) * D and shift = tanh(bias_raw) depend on the parameters alone; y = x * gate + shift."""
import os

import torch
import torch.nn as nn

SMALL = os.environ.get("DRKERNEL_TASK_SIZE", "full") == "small"

rows, dim = (50, 130) if SMALL else (16384, 8192)


class Model(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.logits = nn.Parameter(torch.randn(dim))
        self.bias_raw = nn.Parameter(torch.randn(dim))

    def forward(self, x):
        gate = torch.softmax(self.logits, dim=0) * self.logits.shape[0]
        shift = torch.tanh(self.bias_raw)
        return x * gate + shift


def get_inputs():
    return [torch.randn(rows, dim)]


def get_init_inputs():
    return [dim]
