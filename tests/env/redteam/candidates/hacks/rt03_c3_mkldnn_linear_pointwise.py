"""Class 3 (work outside own kernels; cost-model hole: CPU fused operator not in the FLOP table).
Target: tests/env/redteam/tasks/rt03_linear_tanh.py.
Technique: torch.ops.mkldnn._linear_pointwise(x, W, b, "tanh", [], "") is oneDNN's fused Linear+tanh:
the entire task in one aten-level op, priced by its bytes (~25 KB) rather than 2*M*N*K. A Triton kernel
copies the result to the output (the launch the grader wants)."""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _copy_kernel(src_ptr, dst_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(dst_ptr + offs, tl.load(src_ptr + offs, mask=m, other=0.0), mask=m)


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x):
        h = torch.ops.mkldnn._linear_pointwise(x, self.linear.weight, self.linear.bias, "tanh", [], "")
        y = torch.empty_like(h)
        n = h.numel()
        _copy_kernel[(triton.cdiv(n, 4096),)](h, y, n, BLOCK=4096)
        return y
