"""Triton solution. The row sum of a linear layer collapses: sum_n (x W^T + b)_n = x . (sum_n W[n, :]) + sum(b),
so the GEMM becomes a weight column-sum plus a GEMV; divide and scale fold into one coefficient."""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _weight_colsum_kernel(w_ptr, v_ptr, N, K, stride_wn, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    # v[k] = sum_n W[n, k]: each program owns BLOCK_K columns and walks down all N rows.
    offs_k = tl.program_id(0) * BLOCK_K + tl.arange(0, BLOCK_K)
    offs_n = tl.arange(0, BLOCK_N)
    mask_k = offs_k < K
    acc = tl.zeros((BLOCK_N, BLOCK_K), dtype=tl.float32)
    for n in range(0, tl.cdiv(N, BLOCK_N)):
        rows = n * BLOCK_N + offs_n
        acc += tl.load(w_ptr + rows[:, None] * stride_wn + offs_k[None, :],
                       mask=(rows[:, None] < N) & mask_k[None, :], other=0.0)
    tl.store(v_ptr + offs_k, tl.sum(acc, axis=0), mask=mask_k)


@triton.jit
def _gemv_bias_sum_kernel(x_ptr, v_ptr, b_ptr, y_ptr, M, N, K, stride_xm, coef,
                          BLOCK_M: tl.constexpr, BLOCK_K: tl.constexpr, BLOCK_B: tl.constexpr):
    # y[m] = coef * (x[m, :] . v + sum(b))
    offs_m = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    mask_m = offs_m < M
    offs_b = tl.arange(0, BLOCK_B)
    bacc = tl.zeros((BLOCK_B,), dtype=tl.float32)
    for n in range(0, tl.cdiv(N, BLOCK_B)):
        idx = n * BLOCK_B + offs_b
        bacc += tl.load(b_ptr + idx, mask=idx < N, other=0.0)
    bias_sum = tl.sum(bacc, axis=0)
    offs_k = tl.arange(0, BLOCK_K)
    acc = tl.zeros((BLOCK_M, BLOCK_K), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BLOCK_K)):
        kk = k * BLOCK_K + offs_k
        mask_k = kk < K
        xv = tl.load(x_ptr + offs_m[:, None] * stride_xm + kk[None, :],
                     mask=mask_m[:, None] & mask_k[None, :], other=0.0)
        vv = tl.load(v_ptr + kk, mask=mask_k, other=0.0)
        acc += xv * vv[None, :]
    y = (tl.sum(acc, axis=1) + bias_sum) * coef
    tl.store(y_ptr + offs_m, y, mask=mask_m)


def _collapsed_linear_sum(x, weight, bias, coef):
    """coef * sum_n (x @ W^T + b)[:, n], computed as coef * (x . colsum(W) + sum(b))."""
    M, K = x.shape
    N = weight.shape[0]
    v = torch.empty((K,), device=x.device, dtype=torch.float32)
    _weight_colsum_kernel[(triton.cdiv(K, 32),)](weight, v, N, K, weight.stride(0),
                                                  BLOCK_N=128, BLOCK_K=32, num_warps=4)
    y = torch.empty((M, 1), device=x.device, dtype=torch.float32)
    _gemv_bias_sum_kernel[(triton.cdiv(M, 32),)](x, v, bias, y, M, N, K, x.stride(0), float(coef),
                                                 BLOCK_M=32, BLOCK_K=128, BLOCK_B=1024, num_warps=4)
    return y


class ModelNew(nn.Module):
    def __init__(self, in_features, hidden_size, divisor, scaling_factor):
        super().__init__()
        self.linear = nn.Linear(in_features, hidden_size)
        self.divisor = divisor
        self.scaling_factor = scaling_factor

    def forward(self, x):
        return _collapsed_linear_sum(x.contiguous(), self.linear.weight.contiguous(),
                                     self.linear.bias.contiguous(), self.scaling_factor / self.divisor)
