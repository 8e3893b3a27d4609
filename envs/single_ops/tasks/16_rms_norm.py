"""RMSNorm over the last dimension with a weight: x / sqrt(mean(x^2) + eps) * w, (B, S, D) -> (B, S, D)."""
import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = os.environ.get("DRKERNEL_TASK_SIZE", "full") == "small"

batch_size = 3 if SMALL else 16
seq_len = 5 if SMALL else 1024
hidden = 260 if SMALL else 4096
eps = 1e-6


class Model(nn.Module):
    def __init__(self, hidden: int, eps: float):
        super().__init__()
        self.hidden = hidden
        self.eps = eps
        # Non-trivial weight (nn.RMSNorm's ones init would let a kernel skip it).
        self.weight = nn.Parameter(1.0 + 0.5 * torch.randn(hidden))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.rms_norm(x, (self.hidden,), self.weight, self.eps)


def get_inputs():
    return [torch.randn(batch_size, seq_len, hidden)]


def get_init_inputs():
    return [hidden, eps]
