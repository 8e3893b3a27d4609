"""fp32 linear branch added to a large residual: y = r + (x W^T + b). The residual is ~100x the
branch, so an error in the branch (a TF32 product, say) is small next to |y| but large next to the
fp32 rounding error of y."""
import os

import torch
import torch.nn as nn

SMALL = os.environ.get("DRKERNEL_TASK_SIZE", "full") == "small"

if SMALL:
    batch_size, in_features, out_features = 32, 256, 48
else:
    batch_size, in_features, out_features = 8192, 4096, 4096


class Model(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x, r):
        return r + self.linear(x)


def get_inputs():
    # branch: |x W^T| ~ sqrt(K/3) / sqrt(K) * |x| ~ 0.6; residual ~ 60
    return [torch.randn(batch_size, in_features), 100.0 * torch.randn(batch_size, out_features)]


def get_init_inputs():
    return [in_features, out_features]
