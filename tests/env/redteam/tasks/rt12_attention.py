"""(Red-team corpus: a copy of a bundled envs task.) Scaled dot-product attention, written out: softmax(Q @ K^T * scale) @ V, head_dim 64."""
import math
import os

import torch
import torch.nn as nn

SMALL = os.environ.get("DRKERNEL_TASK_SIZE", "full") == "small"

# Scaling Q and K by s (up to 100) scales the logits by s^2: at |logit| ~ 1e4, fp32 itself resolves
# a logit only to ~1e-3, so two correct fp32 implementations (cuBLAS and a tensor-core Triton
# kernel) disagree on the softmax beyond the 1e-4 tolerance (seen on H100). The test would be
# ill-conditioned, so no "scaled" trials; signs still flip.
INPUT_DISTRIBUTIONS = ("native", "negated")

if SMALL:
    batch_size, num_heads, seq_len, head_dim = 2, 2, 40, 16
else:
    batch_size, num_heads, seq_len, head_dim = 8, 16, 1024, 64


class Model(nn.Module):
    def __init__(self, head_dim):
        super().__init__()
        self.scale = 1.0 / math.sqrt(head_dim)

    def forward(self, q, k, v):
        scores = torch.matmul(q, k.transpose(-2, -1)) * self.scale
        probs = torch.softmax(scores, dim=-1)
        return torch.matmul(probs, v)


def get_inputs():
    shape = (batch_size, num_heads, seq_len, head_dim)
    return [torch.randn(shape), torch.randn(shape), torch.randn(shape)]


def get_init_inputs():
    return [head_dim]
