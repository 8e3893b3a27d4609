"""Class 3 -- targets tasks/rt11_linear_gelu_scale.py (a copy of envs/fused_ops task 02).

Technique: the CPU coverage model charges a torch op by the bytes it touches, not by its work.
The O(M*N*K) GEMM runs in torch (torch.mm), which "costs" only its operands' bytes (~48% of the
reference's bytes); the cheap O(M*N) bias+GELU+scale epilogue runs in Triton and carries the rest,
so coverage stays >= 50% although ~all the FLOPs are torch's.
"""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _bias_gelu_scale_kernel(h_ptr, b_ptr, y_ptr, M, N, scale, BLOCK_N: tl.constexpr):
    row = tl.program_id(0)
    offs = tl.arange(0, BLOCK_N)
    m = offs < N
    h = tl.load(h_ptr + row * N + offs, mask=m, other=0.0)
    b = tl.load(b_ptr + offs, mask=m, other=0.0)
    h = h + b
    y = 0.5 * h * (1.0 + tl.math.erf(h * 0.7071067811865476)) * scale
    tl.store(y_ptr + row * N + offs, y, mask=m)


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features, scaling_factor):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)
        self.scaling_factor = scaling_factor

    def forward(self, x):
        x = x.contiguous()
        w = self.linear.weight
        M, N = x.shape[0], w.shape[0]
        y = torch.mm(x, w.detach().t())
        _bias_gelu_scale_kernel[(M,)](y, self.linear.bias.detach(), y, M, N, float(self.scaling_factor),
                                      BLOCK_N=triton.next_power_of_2(N))
        return y
