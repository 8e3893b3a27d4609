"""GPU-only behaviour of the precision-aware verdict (drkernel.env.judge.precision, drkernel.env.tasks.oracle):
the float64 oracle on the device, TF32 and fp16 products hidden under a bf16 input or a large
residual, and coverage that idle time inside a Triton kernel cannot buy.

Run on a CUDA machine through tests/gpu/run.sh (skipped elsewhere). The corpus of
tests/env/precision is graded on the GPU by the same script's ``precision`` stage.
"""

import pytest
import torch

from drkernel.env.config import EvalConfig
from drkernel.env.evaluation import evaluate

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")

CFG = EvalConfig(device="cuda", timing_trials=20, warmup=3)

# bf16 activations, fp32 weights, fp32 output; RESIDUAL scales a residual added to the product
LINEAR = '''
import torch
import torch.nn as nn

class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(1024, 1024) / 32)

    def forward(self, x, r):
        return x.float() @ self.weight.T + r * RESIDUAL

def get_inputs():
    return [torch.randn(2048, 1024).to(torch.bfloat16), torch.randn(2048, 1024)]

def get_init_inputs():
    return []
'''

KERNEL = '''
import torch
import torch.nn as nn
import triton
import triton.language as tl

@triton.jit
def _linear(x_ptr, w_ptr, r_ptr, y_ptr, M, N, K, scale, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    rm = tl.program_id(0) * BM + tl.arange(0, BM)
    rn = tl.program_id(1) * BN + tl.arange(0, BN)
    rk = tl.arange(0, BK)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k in range(0, K, BK):
        a = tl.load(x_ptr + rm[:, None] * K + (k + rk)[None, :]).to(tl.float32)
        b = tl.load(w_ptr + rn[None, :] * K + (k + rk)[:, None])
        acc += DOT
    r = tl.load(r_ptr + rm[:, None] * N + rn[None, :])
    tl.store(y_ptr + rm[:, None] * N + rn[None, :], acc + r * scale)

class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(1024, 1024) / 32)

    def forward(self, x, r):
        M, K = x.shape
        N = self.weight.shape[0]
        y = torch.empty(M, N, device=x.device, dtype=torch.float32)
        _linear[(M // 64, N // 64)](x, self.weight, r, y, M, N, K, RESIDUAL, BM=64, BN=64, BK=32)
        return y
'''

DOTS = {
    "ieee": ("tl.dot(a, b, input_precision='ieee')", True),
    "tf32x3": ("tl.dot(a, b, input_precision='tf32x3')", True),
    "tf32": ("tl.dot(a, b)", False),  # Triton's default on a GPU: TF32
    "fp16": ("tl.dot(a.to(tl.float16), b.to(tl.float16))", False),
}


@pytest.mark.parametrize("residual", [0.0, 100.0])
@pytest.mark.parametrize("dot", sorted(DOTS))
def test_products_are_judged_by_their_precision_whatever_hides_them(dot, residual):
    """fp32 weights and a bf16 input (the sensitivity allowance of the old rule perturbed the bf16
    input by one of its ulps and paid TF32 at 3.6x), with and without a residual 100x the product
    (atol * rms(ref) was dominated by it: TF32 paid at 2.9x)."""
    expr, honest = DOTS[dot]
    task = LINEAR.replace("RESIDUAL", repr(residual))
    source = KERNEL.replace("DOT", expr).replace("RESIDUAL", repr(residual))
    r = evaluate(task, source, seed=7, config=CFG.with_overrides(measure_performance=False))
    assert r.compiled, r.feedback
    assert r.details["precision"]["oracle"] == "float64 on cuda", r.details["precision"]
    print(f"{dot} residual {residual}: correct={r.correct} worst={r.details['precision'].get('worst')}")
    assert r.correct is honest, r.feedback
    if not honest:
        assert "error too large for the task's precision" in r.error.message, r.error.message


PADDED = '''
import torch
import torch.nn as nn
import triton
import triton.language as tl

@triton.jit
def _relu_and_wait(y_ptr, out_ptr, n, wait_ns, BLOCK: tl.constexpr, CLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    y = tl.load(y_ptr + offs, mask=m, other=0.0)
    start = tl.inline_asm_elementwise(CLOCK, "=l,r", [offs], dtype=tl.int64, is_pure=False, pack=1)
    now = start
    while tl.max(now - start, axis=0) < wait_ns:
        now = tl.inline_asm_elementwise(CLOCK, "=l,r", [offs], dtype=tl.int64, is_pure=False, pack=1)
    tl.store(out_ptr + offs, tl.maximum(y, 0.0), mask=m)

class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(1024, 1024) / 32)

    def forward(self, x, r):
        y = x.float() @ self.weight.T          # cuBLAS does the work
        out = torch.empty_like(y)
        n = y.numel()
        # the clock's PTX built at run time: the static idle_wait check cannot see it, the bound must
        _relu_and_wait[(triton.cdiv(n, 4096),)](y, out, n, WAIT, BLOCK=4096, CLOCK="mov.u64 $0, %global" + "timer;")
        return out
'''

RELU_TASK = LINEAR.replace("x.float() @ self.weight.T + r * RESIDUAL", "torch.relu(x.float() @ self.weight.T)")


def test_idle_time_inside_a_kernel_buys_no_coverage():
    """The candidate's own kernel spins on the GPU's global timer while cuBLAS does the product:
    its own share of the device time is high, but the work outside its kernels takes about the
    reference's whole time, so coverage (bounded by that) stays low and the verdict is not correct."""
    r = evaluate(RELU_TASK, PADDED.replace("WAIT", "200_000"), seed=3, config=CFG)
    prof = r.details.get("profile") or {}
    print(f"padded: correct={r.correct} coverage={r.coverage} own_share={prof.get('own_share')} "
          f"outside_vs_reference={prof.get('outside_vs_reference')}")
    assert r.compiled and not r.passed, r.feedback
    assert prof.get("own_share", 0) > 0.5, prof  # the padding did buy the old measure
    assert r.coverage is not None and r.coverage < 0.5, prof
    assert r.error is not None and r.error.stage == "profiling", r.feedback
    assert "reference's whole time" in r.error.message, r.error.message
