"""BatchNorm2d with batch statistics in three Triton kernels:
1. per (channel, image, HW block) partial mean and M2 (block-local two-pass, in registers);
2. per channel: combine the partials (Chan's parallel formula) into mean/var, fold with the
   affine params into scale/shift;
3. elementwise y = x * scale[c] + shift[c].
x is read twice and written once, and the variance never suffers E[x^2] - E[x]^2 cancellation."""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _bn_partial_kernel(x_ptr, pmean_ptr, pm2_ptr, C, HW, NBLK, P, BLOCK: tl.constexpr):
    c = tl.program_id(0)
    n = tl.program_id(1)
    blk = tl.program_id(2)
    offs = blk * BLOCK + tl.arange(0, BLOCK)
    mask = offs < HW
    x = tl.load(x_ptr + (n * C + c) * HW + offs, mask=mask, other=0.0)
    cnt = tl.minimum(HW - blk * BLOCK, BLOCK).to(tl.float32)
    mean = tl.sum(x, axis=0) / cnt
    d = tl.where(mask, x - mean, 0.0)
    m2 = tl.sum(d * d, axis=0)
    p = c * P + n * NBLK + blk
    tl.store(pmean_ptr + p, mean)
    tl.store(pm2_ptr + p, m2)


@triton.jit
def _bn_finalize_kernel(pmean_ptr, pm2_ptr, w_ptr, b_ptr, scale_ptr, shift_ptr,
                        HW, NBLK, P, total, eps, BLOCK: tl.constexpr, BLOCK_P: tl.constexpr):
    c = tl.program_id(0)
    base = c * P
    # pass 1: total mean = sum(cnt_i * mean_i) / total
    acc = tl.zeros([BLOCK_P], dtype=tl.float32)
    for i in range(0, tl.cdiv(P, BLOCK_P)):
        offs = i * BLOCK_P + tl.arange(0, BLOCK_P)
        mask = offs < P
        blk = offs % NBLK
        cnt = tl.minimum(HW - blk * BLOCK, BLOCK).to(tl.float32)
        pm = tl.load(pmean_ptr + base + offs, mask=mask, other=0.0)
        acc += tl.where(mask, cnt * pm, 0.0)
    mean = tl.sum(acc, axis=0) / total
    # pass 2: M2 = sum(M2_i) + sum(cnt_i * (mean_i - mean)^2)
    acc2 = tl.zeros([BLOCK_P], dtype=tl.float32)
    for i in range(0, tl.cdiv(P, BLOCK_P)):
        offs = i * BLOCK_P + tl.arange(0, BLOCK_P)
        mask = offs < P
        blk = offs % NBLK
        cnt = tl.minimum(HW - blk * BLOCK, BLOCK).to(tl.float32)
        pm = tl.load(pmean_ptr + base + offs, mask=mask, other=0.0)
        pm2 = tl.load(pm2_ptr + base + offs, mask=mask, other=0.0)
        d = pm - mean
        acc2 += tl.where(mask, pm2 + cnt * d * d, 0.0)
    var = tl.sum(acc2, axis=0) / total
    rstd = 1.0 / tl.sqrt(var + eps)
    scale = tl.load(w_ptr + c) * rstd
    tl.store(scale_ptr + c, scale)
    tl.store(shift_ptr + c, tl.load(b_ptr + c) - mean * scale)


@triton.jit
def _bn_apply_kernel(x_ptr, scale_ptr, shift_ptr, out_ptr, C, HW, BLOCK: tl.constexpr):
    plane = tl.program_id(0)          # n * C + c
    blk = tl.program_id(1)
    c = plane % C
    scale = tl.load(scale_ptr + c)
    shift = tl.load(shift_ptr + c)
    offs = blk * BLOCK + tl.arange(0, BLOCK)
    mask = offs < HW
    x = tl.load(x_ptr + plane * HW + offs, mask=mask, other=0.0)
    tl.store(out_ptr + plane * HW + offs, x * scale + shift, mask=mask)


class ModelNew(nn.Module):
    def __init__(self, channels: int, eps: float):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(1.0 + 0.5 * torch.randn(channels))
        self.bias = nn.Parameter(0.5 * torch.randn(channels))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        Nb, C, H, W = x.shape
        HW = H * W
        BLOCK = min(1024, triton.next_power_of_2(HW))
        NBLK = triton.cdiv(HW, BLOCK)
        P = Nb * NBLK
        pmean = torch.empty((C, P), device=x.device, dtype=torch.float32)
        pm2 = torch.empty((C, P), device=x.device, dtype=torch.float32)
        scale = torch.empty((C,), device=x.device, dtype=torch.float32)
        shift = torch.empty((C,), device=x.device, dtype=torch.float32)
        out = torch.empty_like(x)
        _bn_partial_kernel[(C, Nb, NBLK)](x, pmean, pm2, C, HW, NBLK, P, BLOCK=BLOCK, num_warps=4)
        BLOCK_P = min(1024, triton.next_power_of_2(P))
        _bn_finalize_kernel[(C,)](pmean, pm2, self.weight, self.bias, scale, shift,
                                  HW, NBLK, P, float(Nb * HW), self.eps,
                                  BLOCK=BLOCK, BLOCK_P=BLOCK_P, num_warps=4)
        _bn_apply_kernel[(Nb * C, NBLK)](x, scale, shift, out, C, HW, BLOCK=BLOCK, num_warps=4)
        return out
