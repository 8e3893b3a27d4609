"""Linear on bf16 activations with fp32 weights, output in bf16: y = linear(x.float()).to(bfloat16)."""
import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = os.environ.get("DRKERNEL_TASK_SIZE", "full") == "small"

if SMALL:
    batch_size, in_features, out_features = 40, 96, 48
else:
    batch_size, in_features, out_features = 8192, 4096, 4096


class Model(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x):
        return F.linear(x.float(), self.linear.weight, self.linear.bias).to(torch.bfloat16)


def get_inputs():
    return [torch.randn(batch_size, in_features).to(torch.bfloat16)]


def get_init_inputs():
    return [in_features, out_features]
