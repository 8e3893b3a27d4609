"""C = A @ B.T in two Triton kernels: a tiled transpose writes B.T (K, N) into a scratch buffer, then a
tiled fp32 GEMM (grouped tile ordering, exact-fp32 tl.dot) reads both operands in their fast layout.
On an H100/H200 the FMA-based fp32 dot runs about 2x slower with a K-contiguous right operand than the
transpose costs (~2% of the GEMM), so materializing B.T pays off."""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _transpose_kernel(x_ptr, out_ptr, R, C, BLOCK_R: tl.constexpr, BLOCK_C: tl.constexpr):
    rr = tl.program_id(0) * BLOCK_R + tl.arange(0, BLOCK_R)
    rc = tl.program_id(1) * BLOCK_C + tl.arange(0, BLOCK_C)
    x = tl.load(x_ptr + rr[:, None] * C + rc[None, :],
                mask=(rr[:, None] < R) & (rc[None, :] < C), other=0.0)
    tl.store(out_ptr + rc[:, None] * R + rr[None, :], tl.trans(x),
             mask=(rc[:, None] < C) & (rr[None, :] < R))


@triton.jit
def _matmul_kernel(a_ptr, b_ptr, c_ptr, M, N, K,
                   stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
                   BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                   GROUP_M: tl.constexpr):
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
    acc = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BLOCK_K)):
        kk = k * BLOCK_K + rk
        a = tl.load(a_ptr + rm[:, None] * stride_am + kk[None, :] * stride_ak,
                    mask=(rm[:, None] < M) & (kk[None, :] < K), other=0.0)
        b = tl.load(b_ptr + kk[:, None] * stride_bk + rn[None, :] * stride_bn,
                    mask=(kk[:, None] < K) & (rn[None, :] < N), other=0.0)
        acc += tl.dot(a, b, input_precision="ieee")
    tl.store(c_ptr + rm[:, None] * stride_cm + rn[None, :] * stride_cn, acc,
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
        Bt = torch.empty((K, N), device=B.device, dtype=B.dtype)
        TR, TC = _tile(N, 64), _tile(K, 64)
        _transpose_kernel[(triton.cdiv(N, TR), triton.cdiv(K, TC))](
            B, Bt, N, K, BLOCK_R=TR, BLOCK_C=TC, num_warps=4)
        C = torch.empty((M, N), device=A.device, dtype=A.dtype)
        BM, BN, BK = _tile(M, 64), _tile(N, 128), _tile(K, 32)
        grid = (triton.cdiv(M, BM) * triton.cdiv(N, BN),)
        _matmul_kernel[grid](A, Bt, C, M, N, K,
                             A.stride(0), A.stride(1), Bt.stride(0), Bt.stride(1),
                             C.stride(0), C.stride(1),
                             BLOCK_M=BM, BLOCK_N=BN, BLOCK_K=BK, GROUP_M=8,
                             num_warps=4, num_stages=3)
        return C
