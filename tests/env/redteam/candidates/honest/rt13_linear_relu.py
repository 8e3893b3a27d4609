"""Triton solution: x @ W^T + b with the ReLU fused into the GEMM epilogue."""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _linear_relu_kernel(x_ptr, w_ptr, b_ptr, y_ptr, M, N, K,
                        stride_xm, stride_wn, stride_ym,
                        BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                        GROUP_M: tl.constexpr):
    # Grouped tile order: GROUP_M row-tiles share the same W column panel while it sits in L2.
    pid = tl.program_id(0)
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    num_pid_in_group = GROUP_M * num_pid_n
    group_id = pid // num_pid_in_group
    first_pid_m = group_id * GROUP_M
    group_size_m = tl.minimum(num_pid_m - first_pid_m, GROUP_M)
    pid_m = first_pid_m + (pid % num_pid_in_group) % group_size_m
    pid_n = (pid % num_pid_in_group) // group_size_m

    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    mask_m = offs_m < M
    mask_n = offs_n < N
    x_ptrs = x_ptr + offs_m[:, None] * stride_xm + offs_k[None, :]
    w_ptrs = w_ptr + offs_n[None, :] * stride_wn + offs_k[:, None]   # W^T tile: (BLOCK_K, BLOCK_N)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BLOCK_K)):
        k_left = K - k * BLOCK_K
        a = tl.load(x_ptrs, mask=mask_m[:, None] & (offs_k[None, :] < k_left), other=0.0)
        b = tl.load(w_ptrs, mask=mask_n[None, :] & (offs_k[:, None] < k_left), other=0.0)
        acc = tl.dot(a, b, acc, input_precision="tf32x3")
        x_ptrs += BLOCK_K
        w_ptrs += BLOCK_K

    bias = tl.load(b_ptr + offs_n, mask=mask_n, other=0.0)
    y = tl.maximum(acc + bias[None, :], 0.0)
    tl.store(y_ptr + offs_m[:, None] * stride_ym + offs_n[None, :], y,
             mask=mask_m[:, None] & mask_n[None, :])


def _gemm_blocks(M, N):
    # fp32-accurate tensor cores (tl.dot with input_precision="tf32x3": three TF32 products of the
    # operands' high and low parts). 128x128x64 tiles, 8 warps, 3 stages were the fastest tiling on
    # H100 with both operands K-contiguous, about 1.7x cuBLAS fp32 (tests/benchmarks/diagnostics/gemm_sweep.py); small
    # problems get smaller power-of-two tiles (>= 16 for tl.dot) and still several tiles.
    block_m = max(16, min(128, triton.next_power_of_2(M) // 2))
    block_n = max(16, min(128, triton.next_power_of_2(N) // 2))
    return block_m, block_n, 64


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x):
        x = x.contiguous()
        w = self.linear.weight.contiguous()
        b = self.linear.bias.contiguous()
        M, K = x.shape
        N = w.shape[0]
        y = torch.empty((M, N), device=x.device, dtype=torch.float32)
        bm, bn, bk = _gemm_blocks(M, N)
        grid = (triton.cdiv(M, bm) * triton.cdiv(N, bn),)
        _linear_relu_kernel[grid](x, w, b, y, M, N, K, x.stride(0), w.stride(0), y.stride(0),
                                  BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, GROUP_M=8,
                                  num_warps=8, num_stages=3)
        return y
