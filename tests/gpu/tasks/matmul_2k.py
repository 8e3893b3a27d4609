"""fp32 matrix product, 2048 x 2048 x 2048: enough device work (~10 ms unfused fp32) to expose timing games."""
import torch
import torch.nn as nn

N = 2048


class Model(nn.Module):
    def forward(self, a, b):
        return a @ b


def get_inputs():
    return [torch.randn(N, N), torch.randn(N, N)]


def get_init_inputs():
    return []
