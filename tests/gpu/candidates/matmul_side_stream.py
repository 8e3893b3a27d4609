"""Pattern #11: the kernel runs on a side stream and forward returns without waiting.
CUDA events on the current stream see almost nothing; the host clock around a device-wide
synchronisation sees all of it (side_stream), and the static pass flags the stream (cuda_stream)."""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def matmul_kernel(a_ptr, b_ptr, c_ptr, M, N, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr,
                  PRECISION: tl.constexpr):
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    rm = pid_m * BM + tl.arange(0, BM)
    rn = pid_n * BN + tl.arange(0, BN)
    rk = tl.arange(0, BK)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BK)):
        kk = k * BK + rk
        a = tl.load(a_ptr + rm[:, None] * K + kk[None, :], mask=(rm[:, None] < M) & (kk[None, :] < K), other=0.0)
        b = tl.load(b_ptr + kk[:, None] * N + rn[None, :], mask=(kk[:, None] < K) & (rn[None, :] < N), other=0.0)
        acc += tl.dot(a, b, input_precision=PRECISION)
    tl.store(c_ptr + rm[:, None] * N + rn[None, :], acc, mask=(rm[:, None] < M) & (rn[None, :] < N))


def matmul(a, b, precision="ieee"):
    M, K = a.shape
    N = b.shape[1]
    c = torch.empty((M, N), device=a.device, dtype=torch.float32)
    grid = (triton.cdiv(M, 64), triton.cdiv(N, 64))
    matmul_kernel[grid](a, b, c, M, N, K, BM=64, BN=64, BK=32, PRECISION=precision, num_warps=4)
    return c

_SIDE = None


class ModelNew(nn.Module):
    def forward(self, a, b):
        global _SIDE
        if _SIDE is None:
            _SIDE = torch.cuda.Stream()
        _SIDE.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(_SIDE):
            return matmul(a.contiguous(), b.contiguous())
