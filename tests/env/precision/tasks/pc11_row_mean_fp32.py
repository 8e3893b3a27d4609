"""Row mean of many terms, fp32: y = x.mean(-1), x (R, N) with an offset (~100 + N(0, 1)), so the mean
is dominated by the offset and dropping a few terms (or rounding each to bf16) changes it by far
more than fp32 rounding while staying within a small fraction of |y|."""
import os

import torch
import torch.nn as nn

SMALL = os.environ.get("DRKERNEL_TASK_SIZE", "full") == "small"

R, N = (16, 8192) if SMALL else (4096, 16384)


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return x.mean(dim=-1)


def get_inputs():
    return [torch.randn(R, N) + 100.0]


def get_init_inputs():
    return []
