"""Pairwise squared Euclidean distance the GEMM way, fp32: d[i, j] = |q_i|^2 + |k_j|^2 - 2 q_i . k_j.
The points sit far from the origin (a common offset of 8 per coordinate), so the three terms are
~D*64 each and cancel to ~2*D: the product q . k must be fp32-accurate (a TF32 product's error is
~2^-11 of |q||k|, i.e. far above the distances' fp32 rounding)."""
import os

import torch
import torch.nn as nn

SMALL = os.environ.get("DRKERNEL_TASK_SIZE", "full") == "small"

if SMALL:
    M, N, D = 32, 40, 64
else:
    M, N, D = 8192, 8192, 256


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, q, k):
        qq = (q * q).sum(-1, keepdim=True)
        kk = (k * k).sum(-1)
        return qq + kk[None, :] - 2.0 * (q @ k.t())


def get_inputs():
    return [torch.randn(M, D) + 8.0, torch.randn(N, D) + 8.0]


def get_init_inputs():
    return []
