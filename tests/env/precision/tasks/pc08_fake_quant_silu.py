"""Fake quantisation + SiLU, fp32: q = clamp(round(x / s), -128, 127) (round half to even, as
torch.round), y = silu(q * s), with a per-channel scale parameter s. Half of the inputs lie exactly
on a rounding tie (x = (k + 1/2) * s0 with s0 = 1/16 a power of two), so a quantiser that rounds
ties away from zero is wrong there; the scales are reloaded (scaled by [0.5, 1.5)) between trials,
so most trials have no ties and test the ordinary rounding path. Input scaling would move every
value off its tie, so the distributions are native and negated (negation keeps the ties)."""
import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = os.environ.get("DRKERNEL_TASK_SIZE", "full") == "small"

rows, hidden = (64, 256) if SMALL else (16384, 8192)
S0 = 1.0 / 16.0
INPUT_DISTRIBUTIONS = ("native", "negated")


class Model(nn.Module):
    def __init__(self, hidden):
        super().__init__()
        self.scale = nn.Parameter(torch.full((hidden,), S0))

    def forward(self, x):
        q = torch.clamp(torch.round(x / self.scale), -128.0, 127.0)
        return F.silu(q * self.scale)


def get_inputs():
    ties = (torch.randint(-150, 150, (rows, hidden)).float() + 0.5) * S0
    cont = 3.0 * torch.randn(rows, hidden)
    pick = torch.rand(rows, hidden) < 0.5
    return [torch.where(pick, ties, cont)]


def get_init_inputs():
    return [hidden]
