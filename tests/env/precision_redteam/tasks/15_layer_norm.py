"""LayerNorm over the last dimension with affine weight and bias: (B, S, D) -> (B, S, D)."""
import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = os.environ.get("DRKERNEL_TASK_SIZE", "full") == "small"

batch_size = 2 if SMALL else 32
seq_len = 7 if SMALL else 512
hidden = 200 if SMALL else 2048
eps = 1e-5


class Model(nn.Module):
    def __init__(self, hidden: int, eps: float):
        super().__init__()
        self.hidden = hidden
        self.eps = eps
        # Non-trivial affine parameters (nn.LayerNorm's ones/zeros init would let a kernel skip them).
        self.weight = nn.Parameter(1.0 + 0.5 * torch.randn(hidden))
        self.bias = nn.Parameter(0.5 * torch.randn(hidden))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.layer_norm(x, (self.hidden,), self.weight, self.bias, self.eps)


def get_inputs():
    return [torch.randn(batch_size, seq_len, hidden) * 2.0 + 0.5]


def get_init_inputs():
    return [hidden, eps]
