"""Wrong: fp16 operands and an fp16 accumulator (fails the fp32 tolerance). Devices: both."""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _bmm_scale_kernel(a_ptr, b_ptr, c_ptr, M, N, K, sab, sam, sbb, sbk, scb, scm,
                      BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    bid = tl.program_id(2)
    offs_m = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    mm = offs_m < M
    mn = offs_n < N
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float16)
    for k0 in range(0, K, BLOCK_K):
        kk = k0 + offs_k
        a = tl.load(a_ptr + bid * sab + offs_m[:, None] * sam + kk[None, :],
                    mask=mm[:, None] & (kk[None, :] < K), other=0.0)
        b = tl.load(b_ptr + bid * sbb + kk[:, None] * sbk + offs_n[None, :],
                    mask=(kk[:, None] < K) & mn[None, :], other=0.0)
        acc += tl.dot(a.to(tl.float16), b.to(tl.float16), out_dtype=tl.float16)
    tl.store(c_ptr + bid * scb + offs_m[:, None] * scm + offs_n[None, :], (acc * 0.5).to(tl.float32),
             mask=mm[:, None] & mn[None, :])


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, a, b):
        a = a.contiguous()
        b = b.contiguous()
        B, M, K = a.shape
        N = b.shape[2]
        c = torch.empty((B, M, N), device=a.device, dtype=a.dtype)
        BM = 64 if M >= 64 else 32
        BN = 64 if N >= 64 else 32
        grid = (triton.cdiv(M, BM), triton.cdiv(N, BN), B)
        _bmm_scale_kernel[grid](a, b, c, M, N, K, a.stride(0), a.stride(1), b.stride(0), b.stride(1),
                                c.stride(0), c.stride(1), BLOCK_M=BM, BLOCK_N=BN, BLOCK_K=32)
        return c
