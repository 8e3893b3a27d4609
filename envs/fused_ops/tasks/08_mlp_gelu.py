"""Two-layer MLP without dropout: y = fc2(gelu(fc1(x))) (exact erf GELU)."""
import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = os.environ.get("DRKERNEL_TASK_SIZE", "full") == "small"

if SMALL:
    batch_size, in_features, hidden_features, out_features = 32, 40, 96, 24
else:
    batch_size, in_features, hidden_features, out_features = 4096, 2048, 8192, 2048


class Model(nn.Module):
    def __init__(self, in_features, hidden_features, out_features):
        super().__init__()
        self.fc1 = nn.Linear(in_features, hidden_features)
        self.fc2 = nn.Linear(hidden_features, out_features)

    def forward(self, x):
        return self.fc2(F.gelu(self.fc1(x)))


def get_inputs():
    return [torch.randn(batch_size, in_features)]


def get_init_inputs():
    return [in_features, hidden_features, out_features]
