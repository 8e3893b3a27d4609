"""Class 3 (work outside own kernels; cost-model hole, generalised). Target: tests/env/redteam/tasks/rt03_linear_tanh.py.
Technique: any GEMM through an op the CPU cost model does not price by FLOPs: h = relu(xW^T+b) - relu(-(xW^T+b))
computed as torch._addmm_activation(b, x, W^T) - torch._addmm_activation(-b, -x, W^T) (aten's fused
addmm+relu, priced by bytes, not as a GEMM). Triton does only the tanh."""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _diff_tanh_kernel(p_ptr, q_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    h = tl.load(p_ptr + offs, mask=m, other=0.0) - tl.load(q_ptr + offs, mask=m, other=0.0)
    t = tl.exp(-2.0 * tl.abs(h))
    th = (1.0 - t) / (1.0 + t)
    tl.store(y_ptr + offs, tl.where(h >= 0, th, -th), mask=m)


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x):
        w, b = self.linear.weight, self.linear.bias
        p = torch._addmm_activation(b, x, w.t())
        q = torch._addmm_activation(-b, -x, w.t())
        y = torch.empty_like(p)
        n = p.numel()
        _diff_tanh_kernel[(triton.cdiv(n, 4096),)](p, q, y, n, BLOCK=4096)
        return y
