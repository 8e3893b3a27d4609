"""Row-wise L2 normalisation (a reduction then a broadcast): y = x / max(||x||_2, eps) per row."""
import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = os.environ.get("DRKERNEL_TASK_SIZE", "full") == "small"

rows, cols = (40, 257) if SMALL else (16384, 4096)


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return F.normalize(x, p=2.0, dim=1, eps=1e-12)


def get_inputs():
    return [torch.randn(rows, cols)]


def get_init_inputs():
    return []
