"""Class 3 (work outside own kernels; cost-model hole). Target: tasks/rt13_linear_relu.py (a copy of envs/fused_ops task 01).
Technique: torch._addmm_activation (aten's fused addmm + relu/gelu epilogue, a different op than
aten.addmm/aten.mm) does the whole linear+relu; a Triton kernel copies the result out. Tests whether
the CPU cost model prices GEMM-class ops it does not know by bytes only."""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _relu_store_kernel(h_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    h = tl.load(h_ptr + offs, mask=m, other=0.0)
    tl.store(y_ptr + offs, tl.maximum(h, 0.0), mask=m)


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x):
        h = torch._addmm_activation(self.linear.bias, x, self.linear.weight.t())
        y = torch.empty_like(h)
        n = h.numel()
        _relu_store_kernel[(triton.cdiv(n, 4096),)](h, y, n, BLOCK=4096)
        return y
