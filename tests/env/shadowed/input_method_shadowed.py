"""Found by a review (2026-11-27): the input's is_floating_point shadowed on the instance during
forward runs the candidate's code inside the harness's input-mutation check (task relu.py)."""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def relu_kernel(x_ptr, out_ptr, n_elements, BLOCK_SIZE: tl.constexpr):
    pid = tl.program_id(axis=0)
    offsets = pid * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offsets < n_elements
    x = tl.load(x_ptr + offsets, mask=mask)
    tl.store(out_ptr + offsets, tl.maximum(x, 0.0), mask=mask)


import functools


class _Hooks:
    pass


def _mark(x):
    hooks = _Hooks()

    def is_floating_point():
        raise RuntimeError("candidate code inside the mutation check (_same_bits)")

    hooks.is_floating_point = is_floating_point
    functools.update_wrapper(x, hooks, assigned=("is_floating_point",), updated=())


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        _mark(x)
        x = x.contiguous()
        out = torch.empty_like(x)
        n = x.numel()
        relu_kernel[(triton.cdiv(n, 1024),)](x, out, n, BLOCK_SIZE=1024)
        return out
