"""Triton's interpreter made to compute as a GPU does (drkernel.env.process.interpreter): conversions, tl.dot,
the autotuner, and what it cannot run. Kernel-level checks run real Triton kernels through the
interpreter in a process of their own (TRITON_INTERPRET must be set before Triton is imported);
end-to-end checks grade candidates on the CPU."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from drkernel.env.process import interpreter as I

ROOT = Path(__file__).resolve().parents[2]


def _bits(t: torch.Tensor) -> np.ndarray:
    return t.view(torch.int16).numpy().view(np.uint16)


def _ties() -> torch.Tensor:
    """fp32 values exactly halfway between two bf16 values (both parities), and their neighbours."""
    base = torch.randint(0, 1 << 15, (4000,), generator=torch.Generator().manual_seed(1), dtype=torch.int32)
    base = (base & 0x7F7F) | (torch.randint(0, 2, (4000,), dtype=torch.int32) << 15)  # sign, finite
    half = (base.to(torch.int64) << 16 | 0x8000).to(torch.int32)  # the tie
    vals = torch.cat([half, half + 1, half - 1]).view(torch.float32)
    return vals[torch.isfinite(vals)]


# -- conversions, in this process (NumPy only) -------------------------------------------------------------
def test_fp32_to_bf16_rounds_to_nearest_even_like_torch():
    x = torch.cat([torch.randn(20000) * 10, _ties(), torch.tensor([0.0, -0.0, float("inf"), -float("inf"),
                                                                  3.3895314e38, -3.3895314e38, 1e-40, -1e-41])])
    got = I.f32_to_bf16_bits(x.numpy())
    assert (got == _bits(x.to(torch.bfloat16))).all()
    nan = I.f32_to_bf16_bits(np.array([np.nan, -np.nan], dtype=np.float32))
    assert np.isnan(I.bf16_bits_to_f32(nan)).all()
    # towards zero: the low 16 bits dropped
    assert (I.f32_to_bf16_bits(x.numpy(), rtz=True) == (x.numpy().view(np.uint32) >> 16).astype(np.uint16)).all()


def test_fp16_and_fp64_to_bf16_round_once():
    h = torch.randn(5000).to(torch.float16)
    assert (I.to_bf16_bits(h.numpy()) == _bits(h.float().to(torch.bfloat16))).all()
    # 1 + 2^-8 + 2^-30: through fp32 it becomes a tie (-> 1.0); rounded once it is above it (-> 1 + 2^-7)
    d = np.array([1 + 2.0 ** -8 + 2.0 ** -30, -(1 + 2.0 ** -8 + 2.0 ** -30), 1 + 2.0 ** -8, 1e300, 0.1])
    got = I.bf16_bits_to_f32(I.to_bf16_bits(d))
    assert got[0] == 1 + 2.0 ** -7 and got[1] == -(1 + 2.0 ** -7) and got[2] == 1.0
    assert np.isinf(got[3]) and got[4] == torch.tensor(0.1, dtype=torch.float32).to(torch.bfloat16).float().item()


def test_tf32_conversions():
    x = np.array([1 + 2.0 ** -11, 1 + 2.0 ** -11 + 2.0 ** -20, 1 + 2.0 ** -12, -(1 + 2.0 ** -11), np.inf],
                 dtype=np.float32)
    # truncation (what an MMA reads): everything below 2^-10 goes
    assert list(I.tf32_truncate(x)[:4]) == [1.0, 1.0, 1.0, -1.0] and np.isinf(I.tf32_truncate(x)[4])
    # cvt.rna: a tie goes away from zero
    assert list(I.tf32_round_away(x)[:4]) == [1 + 2.0 ** -10, 1 + 2.0 ** -10, 1.0, -(1 + 2.0 ** -10)]
    assert np.isnan(I.tf32_truncate(np.array([np.nan], dtype=np.float32))).all()


# -- real kernels through the interpreter (a process of their own) ----------------------------------------
KERNELS = r'''
import numpy as np
import torch
import triton
import triton.language as tl
from drkernel.env.process import interpreter as I

read = I.install()

@triton.jit
def mm(a, b, c, M: tl.constexpr, N: tl.constexpr, K: tl.constexpr, P: tl.constexpr, OUT16: tl.constexpr):
    rm = tl.arange(0, M)
    rn = tl.arange(0, N)
    rk = tl.arange(0, K)
    x = tl.load(a + rm[:, None] * K + rk[None, :])
    y = tl.load(b + rk[:, None] * N + rn[None, :])
    if OUT16:
        z = tl.dot(x, y, out_dtype=tl.float16)
    elif P == "default":
        z = tl.dot(x, y)
    else:
        z = tl.dot(x, y, input_precision=P)
    tl.store(c + rm[:, None] * N + rn[None, :], z)

@triton.jit
def cast(x, y, n, RTZ: tl.constexpr, BLOCK: tl.constexpr):
    o = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = o < n
    v = tl.load(x + o, mask=m)
    if RTZ:
        w = v.to(y.dtype.element_ty, fp_downcast_rounding="rtz")
    else:
        w = v.to(y.dtype.element_ty)
    tl.store(y + o, w, mask=m)

def ties():
    base = torch.randint(0, 1 << 15, (4000,), generator=torch.Generator().manual_seed(1), dtype=torch.int32)
    base = (base & 0x7F7F) | (torch.randint(0, 2, (4000,), dtype=torch.int32) << 15)
    half = (base.to(torch.int64) << 16 | 0x8000).to(torch.int32)
    vals = torch.cat([half, half + 1, half - 1]).view(torch.float32)
    return vals[torch.isfinite(vals)]

def run_cast(x, dtype, rtz=False):
    y = torch.empty(x.shape, dtype=dtype)
    cast[(triton.cdiv(x.numel(), 4096),)](x, y, x.numel(), RTZ=rtz, BLOCK=4096)
    return y

def check_casts():
    g = torch.Generator().manual_seed(0)
    x = torch.cat([torch.randn(30000, generator=g) * 8, ties(), torch.tensor([0.0, -0.0, float("inf"), 3.3895314e38])])
    same = lambda a, b: bool((a.view(torch.int16) == b.view(torch.int16)).all())
    assert same(run_cast(x, torch.bfloat16), x.to(torch.bfloat16)), "fp32 -> bf16"
    fp16_ties = (torch.randint(0, 1 << 14, (4000,), generator=g, dtype=torch.int32) << 13 | 0x1000).view(torch.float32)
    xh = torch.cat([x, fp16_ties[torch.isfinite(fp16_ties)]])
    assert same(run_cast(xh, torch.float16), xh.to(torch.float16)), "fp32 -> fp16"
    rz = run_cast(x, torch.bfloat16, rtz=True)
    assert bool((rz.view(torch.int16) == (x.view(torch.int32) >> 16).to(torch.int16)).all()), "rtz"
    b = torch.randn(5000, generator=g).to(torch.bfloat16)
    assert torch.equal(run_cast(b, torch.float32), b.float()), "bf16 -> fp32"
    assert same(run_cast(b, torch.float16), b.float().to(torch.float16)), "bf16 -> fp16"
    h = torch.randn(5000, generator=g).to(torch.float16)
    assert same(run_cast(h, torch.bfloat16), h.float().to(torch.bfloat16)), "fp16 -> bf16"
    return "casts ok"

def dot(a, b, p="default", out16=False):
    M, K = a.shape
    N = b.shape[1]
    c = torch.empty(M, N, dtype=torch.float16 if out16 else torch.float32)
    mm[(1,)](a, b, c, M, N, K, p, out16)
    return c

def check_half_dots():
    g = torch.Generator().manual_seed(2)
    for dtype in (torch.bfloat16, torch.float16):
        a = torch.randn(32, 64, generator=g).to(dtype)
        b = torch.randn(64, 16, generator=g).to(dtype)
        want = a.double() @ b.double()  # the products are exact in fp32: only the fp32 sums round
        err = (dot(a, b).double() - want).abs().max().item()
        assert err < 64 * 2.0 ** -24 * want.abs().max().item(), (dtype, err)
    a = torch.randn(32, 32, generator=g).to(torch.float16)
    b = torch.randn(32, 32, generator=g).to(torch.float16)
    got = dot(a, b, out16=True)
    assert got.dtype == torch.float16
    assert (got.float() - (a.float() @ b.float()).to(torch.float16).float()).abs().max().item() <= 2e-2
    return "half dots ok"

def check_fp32_dots():
    g = torch.Generator().manual_seed(3)
    a = torch.randn(64, 64, generator=g)
    b = torch.randn(64, 32, generator=g)
    want = a.double() @ b.double()
    rel = lambda c: ((c.double() - want).abs().max() / want.abs().max()).item()
    errs = {p: rel(dot(a, b, p)) for p in ("default", "tf32", "tf32x3", "ieee", "bf16x3", "bf16x6")}
    assert 1e-4 < errs["default"] < 1e-2 and errs["tf32"] == errs["default"], errs  # TF32-sized
    assert errs["tf32x3"] < 2e-6 and errs["ieee"] < 2e-6, errs  # fp32-sized
    assert errs["bf16x3"] < 1e-4 and errs["bf16x6"] < 2e-6, errs
    # TF32: the operands truncated to 10 mantissa bits, then an fp32 product of them
    trunc = lambda t: (t.view(torch.int32) & ~0x1FFF).view(torch.float32)
    exact = trunc(a).double() @ trunc(b).double()
    assert ((dot(a, b).double() - exact).abs().max() / exact.abs().max()).item() < 2e-6
    return "fp32 dots ok " + repr(errs)

@triton.jit
def arith(x, y, o, s, BLOCK: tl.constexpr):
    r = tl.arange(0, BLOCK)
    a = tl.load(x + r)
    b = tl.load(y + r)
    tl.store(o + r, tl.where(a < b, tl.maximum(a, b), a * b - a / b))
    tl.store(s, tl.sum(a, axis=0))
    tl.store(s + 1, tl.max(a, axis=0))
    tl.store(s + 2, tl.min(a, axis=0))
    tl.store(s + 3, tl.argmax(a, axis=0).to(tl.bfloat16))

def check_bf16_arithmetic():
    g = torch.Generator().manual_seed(4)
    x = torch.randn(64, generator=g).to(torch.bfloat16)
    y = torch.randn(64, generator=g).to(torch.bfloat16)
    o = torch.empty(64, dtype=torch.bfloat16)
    s = torch.empty(4, dtype=torch.bfloat16)
    arith[(1,)](x, y, o, s, BLOCK=64)
    xf, yf = x.float(), y.float()  # each bf16 operation rounds its exact result once; Triton divides
    want = torch.where(xf < yf, torch.maximum(xf, yf), (xf * yf).bfloat16().float() - xf / yf)  # bf16 in fp32
    assert torch.equal(o, want.bfloat16()), (o - want).abs().max()
    assert abs(s[0].item() - xf.sum().item()) <= 2 ** -7 * xf.abs().sum().item(), (s[0], xf.sum())
    assert s[1].item() == x.max().item() and s[2].item() == x.min().item() and s[3].item() == xf.argmax().item()
    return "bf16 arithmetic ok"

def check_unjudgeable():
    @triton.jit
    def asm(x, y, BLOCK: tl.constexpr):
        o = tl.arange(0, BLOCK)
        v = tl.inline_asm_elementwise("cvt.rna.tf32.f32 $0, $1;", "=r,r", [tl.load(x + o)], dtype=tl.float32,
                                      is_pure=True, pack=1)
        tl.store(y + o, v)
    x = torch.randn(16)
    try:
        asm[(1,)](x, torch.empty(16), BLOCK=16)
    except Exception as exc:
        assert I.UNJUDGEABLE in str(exc), exc
    else:
        raise AssertionError("inline asm ran in the interpreter")
    assert I.records(read)["unjudgeable"], I.records(read)
    return "unjudgeable ok"
'''


def _in_interpreter(check: str) -> str:
    env = {**os.environ, "TRITON_INTERPRET": "1", "PYTHONPATH": str(ROOT)}
    code = KERNELS + f"\nprint({check}())\n"
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout


def test_casts_in_a_kernel_round_like_torch():
    """fp32 -> bf16 and fp32 -> fp16 in a kernel round to nearest even bit for bit as
    ``tensor.to(...)`` (ties of both parities included); ``rtz`` truncates; bf16 -> fp32/fp16 and
    fp16 -> bf16 are exact then rounded once. The interpreter truncated fp32 -> bf16 and cast bf16 to
    fp16 through its bits as an integer."""
    assert "casts ok" in _in_interpreter("check_casts")


def test_bf16_arithmetic_is_on_values():
    """``+ - * /``, comparisons, max, and reductions on bf16 computed on the raw 16 bits as integers
    (``a * b`` ~1e31, ``tl.max`` wrong for negatives); now on the values, rounded once."""
    assert "bf16 arithmetic ok" in _in_interpreter("check_bf16_arithmetic")


def test_bf16_and_fp16_dots_accumulate_in_fp32():
    """bf16 ``tl.dot`` returned ~1e10 (16-bit integers multiplied); both half types now match the
    exact product to within fp32 summation."""
    assert "half dots ok" in _in_interpreter("check_half_dots")


def test_fp32_dot_follows_input_precision():
    """Default and ``tf32``: TF32-sized error (operands truncated, as a GPU's MMA reads them);
    ``tf32x3``/``ieee``/``bf16x6``: fp32-sized; ``bf16x3`` in between (the interpreter refused both
    bf16 modes)."""
    assert "fp32 dots ok" in _in_interpreter("check_fp32_dots")


def test_inline_asm_is_recorded_as_unjudgeable():
    assert "unjudgeable ok" in _in_interpreter("check_unjudgeable")


# -- end to end: the grader on the CPU ------------------------------------------------------------------------
AUTOTUNED = '''
import torch
import torch.nn as nn
import triton
import triton.language as tl

@triton.autotune(configs=[triton.Config({"BLOCK": 64}), triton.Config({"BLOCK": 128}, num_warps=2),
                          triton.Config({"BLOCK": 256}, num_warps=8)], key=["n"])
@triton.jit
def _double(x_ptr, o_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(o_ptr + offs, tl.load(x_ptr + offs, mask=m) * 2.0, mask=m)

class ModelNew(nn.Module):
    def forward(self, x):
        out = torch.empty_like(x)
        _double[lambda meta: (triton.cdiv(x.numel(), meta["BLOCK"]),)](x, out, x.numel())
        return out
'''

BF16_TASK = '''
import torch
import torch.nn as nn

class Model(nn.Module):
    def forward(self, x):
        return (x.float() * 3.0 + 1.0).to(torch.bfloat16)

def get_inputs():
    return [torch.randn(4099).to(torch.bfloat16)]

def get_init_inputs():
    return []
'''

BF16_KERNEL = '''
import torch
import torch.nn as nn
import triton
import triton.language as tl

@triton.jit
def _affine(x_ptr, o_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    x = tl.load(x_ptr + offs, mask=m).to(tl.float32)
    tl.store(o_ptr + offs, (x * 3.0 + 1.0).to(tl.bfloat16), mask=m)

class ModelNew(nn.Module):
    def forward(self, x):
        out = torch.empty_like(x)
        _affine[(triton.cdiv(x.numel(), 1024),)](x, out, x.numel(), BLOCK=1024)
        return out
'''

INLINE_ASM = '''
import torch
import torch.nn as nn
import triton
import triton.language as tl

@triton.jit
def _rna(x_ptr, o_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    v = tl.inline_asm_elementwise("cvt.rna.tf32.f32 $0, $1;", "=r,r", [tl.load(x_ptr + offs, mask=m)],
                                  dtype=tl.float32, is_pure=True, pack=1)
    tl.store(o_ptr + offs, v * 2.0, mask=m)

class ModelNew(nn.Module):
    def forward(self, x):
        out = torch.empty_like(x)
        _rna[(triton.cdiv(x.numel(), 256),)](x, out, x.numel(), BLOCK=256)
        return out
'''


def _grade(task: str, source: str):
    from drkernel.env.conformance import FAST_OPTIONS
    from drkernel.env.config import EvalConfig
    from drkernel.env.evaluation import evaluate

    return evaluate(task, source, seed=0, config=EvalConfig(device="cpu").with_overrides(**FAST_OPTIONS))


@pytest.mark.slow
def test_an_autotuned_kernel_runs_its_first_config_on_the_cpu():
    """Three configs: the autotuner benchmarked them through the GPU driver ("0 active drivers")
    and the honest kernel was graded incorrect. The result says what the CPU did instead."""
    from drkernel.env.conformance import PROBE_TASK

    r = _grade(PROBE_TASK, AUTOTUNED)
    text = repr(r.error) + repr(r.details.get("trials"))
    assert "active drivers" not in text and r.compiled, r.error
    assert r.correct, r.error
    assert "autotune runs the first config" in r.details["isolation"]["interpreter"]


@pytest.mark.slow
def test_an_honest_bf16_kernel_rounds_as_the_reference():
    """fp32 math, one rounding at the store: bit for bit the reference's (the interpreter truncated,
    one bf16 ulp off in about half the elements)."""
    r = _grade(BF16_TASK, BF16_KERNEL)
    assert r.compiled and r.correct and r.error is None, r.error
    first = (r.details or {}).get("first_failure")
    assert first is None, first


@pytest.mark.slow
def test_what_the_interpreter_cannot_run_is_not_called_incorrect():
    from drkernel.env.conformance import PROBE_TASK

    r = _grade(PROBE_TASK, INLINE_ASM)
    assert r.error is not None and not r.passed
    assert r.error.message.find(I.UNJUDGEABLE) >= 0, r.error
