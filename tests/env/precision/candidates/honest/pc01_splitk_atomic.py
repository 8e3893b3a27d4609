"""Honest: split-K GEMM: each program sums one K slice (ieee fp32 dot products) and atomically adds it
into a zeroed fp32 output; the first slice adds the bias. The order of the atomic adds is not fixed."""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _splitk_kernel(x_ptr, w_ptr, b_ptr, y_ptr, M, N, K, K_PER_SPLIT, sxm, swn, sym,
                   BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    pid_k = tl.program_id(2)
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    mm = offs_m < M
    mn = offs_n < N
    k_start = pid_k * K_PER_SPLIT
    k_end = tl.minimum(k_start + K_PER_SPLIT, K)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(k_start, k_end, BLOCK_K):
        kk = k0 + offs_k
        km = kk < k_end
        a = tl.load(x_ptr + offs_m[:, None] * sxm + kk[None, :], mask=mm[:, None] & km[None, :], other=0.0)
        b = tl.load(w_ptr + offs_n[None, :] * swn + kk[:, None], mask=mn[None, :] & km[:, None], other=0.0)
        acc = tl.dot(a, b, acc, input_precision="ieee")
    if pid_k == 0:
        bias = tl.load(b_ptr + offs_n, mask=mn, other=0.0)
        acc += bias[None, :]
    tl.atomic_add(y_ptr + offs_m[:, None] * sym + offs_n[None, :], acc, mask=mm[:, None] & mn[None, :])


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x):
        x = x.contiguous()
        w = self.linear.weight.contiguous()
        M, K = x.shape
        N = w.shape[0]
        y = torch.zeros((M, N), device=x.device, dtype=torch.float32)
        BM, BN, BK = (64, 64, 32)
        split = 4
        k_per = triton.cdiv(triton.cdiv(K, split), BK) * BK
        grid = (triton.cdiv(M, BM), triton.cdiv(N, BN), triton.cdiv(K, k_per))
        _splitk_kernel[grid](x, w, self.linear.bias, y, M, N, K, k_per, x.stride(0), w.stride(0), y.stride(0),
                             BLOCK_M=BM, BLOCK_N=BN, BLOCK_K=BK, num_warps=4)
        return y
