"""Column gather (index_select along dim 1): each program loads BLOCK_K indices once and gathers them
for BLOCK_R rows (one, at these sizes: the whole index list per row, so the row stays in L1/L2) into a
contiguous [BLOCK_R, BLOCK_K] tile of the output."""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _index_select_cols_kernel(x_ptr, idx_ptr, out_ptr, R, N, K,
                              BLOCK_R: tl.constexpr, BLOCK_K: tl.constexpr):
    # axis 0 walks the index blocks, so consecutive programs gather from the same rows (L2 hits)
    rk = tl.program_id(0) * BLOCK_K + tl.arange(0, BLOCK_K)
    rr = tl.program_id(1) * BLOCK_R + tl.arange(0, BLOCK_R)
    mask_k = rk < K
    mask = (rr[:, None] < R) & mask_k[None, :]
    cols = tl.load(idx_ptr + rk, mask=mask_k, other=0)          # int64
    vals = tl.load(x_ptr + rr[:, None].to(tl.int64) * N + cols[None, :], mask=mask, other=0.0)
    tl.store(out_ptr + rr[:, None] * K + rk[None, :], vals, mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        idx = idx.contiguous()
        R, N = x.shape
        K = idx.numel()
        out = torch.empty((R, K), device=x.device, dtype=x.dtype)
        BLOCK_R = 1
        BLOCK_K = min(4096, triton.next_power_of_2(K))
        grid = (triton.cdiv(K, BLOCK_K), triton.cdiv(R, BLOCK_R))
        _index_select_cols_kernel[grid](x, idx, out, R, N, K,
                                        BLOCK_R=BLOCK_R, BLOCK_K=BLOCK_K,
                                        num_warps=8 if BLOCK_K >= 4096 else 4)
        return out
