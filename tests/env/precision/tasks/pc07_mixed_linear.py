"""Mixed precision linear: bf16 activations, fp32 weight and bias, fp32 output:
y = x.to(W.dtype) @ W^T + b. The bf16 input is exact in fp32 (and in TF32); the weight is not, so a
TF32 or bf16 product loses the weight's low bits. (The cast is written `.to(self.linear.weight.dtype)`
rather than `.float()` so the float64 oracle -- the model cast to float64 -- stays in float64.)"""
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

    def forward(self, x):
        return self.linear(x.to(self.linear.weight.dtype))


def get_inputs():
    return [torch.randn(batch_size, in_features).to(torch.bfloat16)]


def get_init_inputs():
    return [in_features, out_features]
