"""C = A @ B.T in one tiled Triton GEMM that reads B (N, K) in place as the K-contiguous right operand.

fp32-accurate tensor cores: ``tl.dot(..., input_precision="tf32x3")`` splits each operand into a TF32
high and low part and adds three tensor-core products (hi*hi + hi*lo + lo*hi), with an error close to
fp32's (about 0.01 of the suite's tolerance in tests/benchmarks/diagnostics/gemm_sweep.py). Hopper's TF32 tensor-core
instruction wants both operands K-contiguous, which B (N, K) already is: no transpose is needed.
Grouped tile order keeps GROUP_M row-tiles on the same B panel while it sits in L2."""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _matmul_nt_kernel(a_ptr, b_ptr, c_ptr, M, N, K, stride_am, stride_bn, stride_cm,
                      BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                      GROUP_M: tl.constexpr):
    # C[m, n] = sum_k A[m, k] * B[n, k]; both operands unit-stride along K.
    pid = tl.program_id(0)
    num_m = tl.cdiv(M, BLOCK_M)
    num_n = tl.cdiv(N, BLOCK_N)
    group = GROUP_M * num_n
    first_m = (pid // group) * GROUP_M
    size_m = tl.minimum(num_m - first_m, GROUP_M)
    pid_m = first_m + (pid % group) % size_m
    pid_n = (pid % group) // size_m
    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    rk = tl.arange(0, BLOCK_K)
    a_ptrs = a_ptr + rm[:, None] * stride_am + rk[None, :]
    b_ptrs = b_ptr + rn[None, :] * stride_bn + rk[:, None]        # (BLOCK_K, BLOCK_N) view of B.T
    acc = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BLOCK_K)):
        k_left = K - k * BLOCK_K
        a = tl.load(a_ptrs, mask=(rm[:, None] < M) & (rk[None, :] < k_left), other=0.0)
        b = tl.load(b_ptrs, mask=(rk[:, None] < k_left) & (rn[None, :] < N), other=0.0)
        acc = tl.dot(a, b, acc, input_precision="tf32x3")
        a_ptrs += BLOCK_K
        b_ptrs += BLOCK_K
    tl.store(c_ptr + rm[:, None] * stride_cm + rn[None, :], acc,
             mask=(rm[:, None] < M) & (rn[None, :] < N))


def _tile(n, cap):
    return max(16, min(cap, triton.next_power_of_2(n)))


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, A: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
        A = A.contiguous()
        B = B.contiguous()
        M, K = A.shape
        N = B.shape[0]                      # B is (N, K)
        C = torch.empty((M, N), device=A.device, dtype=A.dtype)
        # 128x128x64 tiles, 8 warps, 3 stages: fastest tf32x3 tiling on H100
        # (tests/benchmarks/diagnostics/gemm_sweep.py).
        BM, BN, BK = _tile(M, 128), _tile(N, 128), _tile(K, 64)
        grid = (triton.cdiv(M, BM) * triton.cdiv(N, BN),)
        _matmul_nt_kernel[grid](A, B, C, M, N, K, A.stride(0), B.stride(0), C.stride(0),
                                BLOCK_M=BM, BLOCK_N=BN, BLOCK_K=BK, GROUP_M=8,
                                num_warps=8, num_stages=3)
        return C
