"""Per-row cross-entropy: loss[i] = -log_softmax(logits, dim=1)[i, target[i]] (no reduction)."""
import os

import torch
import torch.nn as nn

SMALL = os.environ.get("DRKERNEL_TASK_SIZE", "full") == "small"

if SMALL:
    batch_size, num_classes = 24, 500
else:
    batch_size, num_classes = 4096, 32000


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, logits, targets):
        log_probs = torch.log_softmax(logits, dim=1)
        return -log_probs.gather(1, targets.unsqueeze(1)).squeeze(1)


def get_inputs():
    logits = torch.randn(batch_size, num_classes) * 2.0
    targets = torch.randint(0, num_classes, (batch_size,))
    return [logits, targets]


def get_init_inputs():
    return []
