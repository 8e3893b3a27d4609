"""Two-layer MLP on bf16 activations with fp32 (master) weights, bf16 output:
y = fc2(relu(fc1(x.float()))).to(bfloat16)."""
import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = os.environ.get("DRKERNEL_TASK_SIZE", "full") == "small"

if SMALL:
    batch_size, d_model, d_hidden = 32, 64, 128
else:
    batch_size, d_model, d_hidden = 8192, 4096, 16384


class Model(nn.Module):
    def __init__(self, d_model, d_hidden):
        super().__init__()
        self.fc1 = nn.Linear(d_model, d_hidden)
        self.fc2 = nn.Linear(d_hidden, d_model)

    def forward(self, x):
        h = F.relu(self.fc1(x.float()))
        return self.fc2(h).to(torch.bfloat16)


def get_inputs():
    return [torch.randn(batch_size, d_model).to(torch.bfloat16)]


def get_init_inputs():
    return [d_model, d_hidden]
