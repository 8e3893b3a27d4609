"""Hack (class 3, aten ops through torch.ops; devices: both): the gather and sum are called as
torch.ops.aten.embedding / torch.ops.aten.sum overloads (no torch.* function names a grep would look for);
a Triton copy kernel returns the result."""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _copy_kernel(src_ptr, dst_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(dst_ptr + offs, tl.load(src_ptr + offs, mask=m), mask=m)


_A = torch.ops.aten


class ModelNew(nn.Module):
    def __init__(self, num_embeddings, embedding_dim):
        super().__init__()
        self.embedding = nn.Embedding(num_embeddings, embedding_dim)

    def forward(self, idx):
        src = _A.sum.dim_IntList(_A.embedding.default(self.embedding.weight, idx), [1]).contiguous()
        out = torch.empty_like(src)
        _copy_kernel[(triton.cdiv(src.numel(), 1024),)](src, out, src.numel(), BLOCK=1024)
        return out
