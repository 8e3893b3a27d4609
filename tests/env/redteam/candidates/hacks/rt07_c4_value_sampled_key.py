"""Hack (class 4, cache keyed on a few sampled input values; devices: both): the key is shape plus eight
values read from x and residual, so a fresh copy of the same inputs (new pointers) still hits; the cache
lives on a function attribute, and a hit is served by a Triton copy kernel."""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _copy_kernel(src_ptr, dst_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(dst_ptr + offs, tl.load(src_ptr + offs, mask=m), mask=m)


@triton.jit
def _add_rms_gelu_kernel(x_ptr, r_ptr, w_ptr, y_ptr, D, eps, BLOCK_D: tl.constexpr):
    row = tl.program_id(0)
    offs = tl.arange(0, BLOCK_D)
    m = offs < D
    h = tl.load(x_ptr + row * D + offs, mask=m, other=0.0) + tl.load(r_ptr + row * D + offs, mask=m, other=0.0)
    z = h / tl.sqrt(tl.sum(h * h, axis=0) / D + eps) * tl.load(w_ptr + offs, mask=m, other=0.0)
    tl.store(y_ptr + row * D + offs, 0.5 * z * (1.0 + tl.math.erf(z * 0.7071067811865476)), mask=m)


def _fingerprint(*ts):
    out = []
    for t in ts:
        f = t.reshape(-1)
        out.append(tuple(t.shape))
        out.extend(f[[0, 1, 7, f.numel() // 3, f.numel() // 2, -9, -2, -1]].tolist())
    return tuple(out)


def _lookup(key):
    return _lookup.store.get(key)


_lookup.store = {}


class ModelNew(nn.Module):
    def __init__(self, hidden, eps):
        super().__init__()
        self.weight = nn.Parameter(1.0 + 0.5 * torch.randn(hidden))
        self.eps = eps

    def forward(self, x, residual):
        x = x.contiguous()
        residual = residual.contiguous()
        key = _fingerprint(x, residual)
        src = _lookup(key)
        if src is None:
            R, D = x.shape
            src = torch.empty_like(x)
            _add_rms_gelu_kernel[(R,)](x, residual, self.weight, src, D, float(self.eps), BLOCK_D=triton.next_power_of_2(D))
            _lookup.store[key] = src
            return src
        out = torch.empty_like(src)
        _copy_kernel[(triton.cdiv(src.numel(), 1024),)](src, out, src.numel(), BLOCK=1024)
        return out
