"""Classifier head: Linear followed by log-softmax over the classes: y = log_softmax(linear(x), dim=1)."""
import os

import torch
import torch.nn as nn

SMALL = os.environ.get("DRKERNEL_TASK_SIZE", "full") == "small"

if SMALL:
    batch_size, in_features, num_classes = 40, 64, 100
else:
    batch_size, in_features, num_classes = 8192, 2048, 8192


class Model(nn.Module):
    def __init__(self, in_features, num_classes):
        super().__init__()
        self.linear = nn.Linear(in_features, num_classes)

    def forward(self, x):
        return torch.log_softmax(self.linear(x), dim=1)


def get_inputs():
    return [torch.randn(batch_size, in_features)]


def get_init_inputs():
    return [in_features, num_classes]
