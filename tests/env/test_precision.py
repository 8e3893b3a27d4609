"""The precision-aware verdict (drkernel.env.judge.precision) and its float64 oracle (drkernel.env.tasks.oracle):
numbers worked by hand, the shortcuts it must refuse and the honest kernels it must accept (as torch
computations standing in for kernels), discontinuities, non-finite values, the policies, the
fused kernels against the torch path, and the oracle's float64 forward."""

from __future__ import annotations

import math

import pytest
import torch

from drkernel.env.judge import precision
from drkernel.env.config import EvalConfig
from drkernel.env.tasks.oracle import Float64Mode, OracleUnavailable, evaluate_float64, widen_inputs, widen_model
from drkernel.env.judge.precision import judge, round_operand, ulp


def g(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


# -- units in the last place, rounding to a format -------------------------------------------------
def test_ulp_by_hand():
    x = torch.tensor([1.0, 1.5, 2.0, 0.75, 0.0, 1e-45], dtype=torch.float64)
    assert ulp(x, torch.float32).tolist()[:4] == [2.0 ** -23, 2.0 ** -23, 2.0 ** -22, 2.0 ** -24]
    assert ulp(x, torch.float32).tolist()[4:] == [2.0 ** -149, 2.0 ** -149]  # subnormal spacing, also at 0
    assert ulp(x, torch.bfloat16).tolist()[:3] == [2.0 ** -7, 2.0 ** -7, 2.0 ** -6]
    assert ulp(x, torch.float16).tolist()[:3] == [2.0 ** -10, 2.0 ** -10, 2.0 ** -9]
    assert ulp(torch.tensor([0.0], dtype=torch.float64), torch.float16).item() == 2.0 ** -24


def test_round_operand_to_tf32_is_nearest_even_with_float32_range():
    x = torch.tensor([1 + 2 ** -11, 1 + 3 * 2 ** -11, 1 + 2 ** -11 + 2 ** -20, -(1 + 3 * 2 ** -12)], dtype=torch.float64)
    assert round_operand(x, "tf32").tolist() == [1.0, 1 + 2 ** -9, 1 + 2 ** -10, -(1 + 2 ** -10)]
    y = torch.randn(1000, generator=g(1), dtype=torch.float64)
    assert torch.equal(round_operand(y, "bf16"), y.to(torch.bfloat16).double())
    assert torch.equal(round_operand(y, "fp16"), y.to(torch.float16).double())


# -- what passes and what fails --------------------------------------------------------------------
def _gemm(seed=0, m=128, k=512, n=96):
    a, b = torch.randn(m, k, generator=g(seed)), torch.randn(k, n, generator=g(seed + 1))
    return a, b, a @ b, a.double() @ b.double()


def _tf32(x):
    return round_operand(x.double(), "tf32")


def test_another_fp32_summation_order_and_tf32x3_pass_tf32_and_half_fail():
    a, b, ref, oracle = _gemm()
    split = sum(a[:, i:i + 128] @ b[i:i + 128] for i in range(0, 512, 128))
    assert judge(split, ref, oracle).ok
    ah, bh = _tf32(a), _tf32(b)
    al, bl = _tf32(a.double() - ah), _tf32(b.double() - bh)
    assert judge((ah @ bh + ah @ bl + al @ bh).float(), ref, oracle).ok
    tf32 = judge((ah @ bh).float(), ref, oracle)
    assert not tf32.ok and "error too large for the task's precision" in tf32.message
    assert "TF32" in tf32.message and "input_precision" in tf32.message
    half = (a.half().double() @ b.half().double()).float()
    assert not judge(half, ref, oracle).ok


def test_tf32_under_a_large_residual_fails_and_under_an_overwhelming_one_does_not_matter():
    """The residual's own rounding adds to both errors alike; TF32 in a branch 100x smaller than the
    residual is ~25 fp32 ulp of the output (atol * rms(ref) allowed ~1,700); 10^4x smaller, below
    one ulp: then it does not change the output."""
    a, b, ref, oracle = _gemm(3)
    for factor, ok in ((100.0, False), (1e4, True)):
        res = torch.randn(ref.shape, generator=g(9)) * factor * math.sqrt(512)
        got = judge((_tf32(a) @ _tf32(b)).float() + res, ref + res, oracle + res.double())
        assert got.ok is ok, (factor, got.message)


def test_a_bf16_kernel_more_accurate_than_eager_passes_and_fp8_internals_fail():
    x = (torch.randn(1 << 14, generator=g(4)) * 3).bfloat16()
    w, c = torch.randn(1 << 14, generator=g(5)).bfloat16(), torch.randn(1 << 14, generator=g(6)).bfloat16()

    def f(x, w, c):
        return torch.nn.functional.gelu(x * w + c) * 0.7 + x

    ref, oracle = f(x, w, c), f(x.double(), w.double(), c.double())
    once = f(x.float(), w.float(), c.float()).bfloat16()  # fp32 math, one rounding at the store
    assert (once != ref).sum() > 100  # eager rounds after every op: many elements differ by an ulp
    assert judge(once, ref, oracle).ok
    fp8 = f(x.to(torch.float8_e4m3fn).float(), w.float(), c.float()).bfloat16()
    assert not judge(fp8, ref, oracle).ok


def test_a_localised_error_fails_even_where_the_norm_dilutes_it():
    a, b, ref, oracle = _gemm(5, m=2048)
    out = (a.double() @ b.double()).float()
    out[-1, -1] *= 1.0001  # one element, 0.01 % (~800 ulp): below the error norm, far above rounding
    got = judge(out, ref, oracle)
    assert not got.ok and "1 of" in got.message and "the reference has none" in got.message
    assert got.precision["norm_ok"] and got.precision["flips"] == 1


def test_flips_at_a_discontinuity_are_allowed_as_the_reference_shows_them_not_more():
    """x / s rounded: where x / s lies within an ulp of a half-integer, the reference's own rounding
    lands on either side of the true value. Flips the reference shows are allowed F_FLIPS times."""
    s = 0.1
    q = torch.cat([torch.arange(-200, 200, dtype=torch.float64) + 0.5,  # on the boundaries
                   torch.rand(40000, generator=g(8), dtype=torch.float64) * 400 - 200])  # and anywhere
    x = (q * s).float()  # the boundary ones within an ulp of a half-integer after the division
    ref = torch.round(x / torch.tensor(s, dtype=torch.float32)) * s
    oracle = torch.round(x.double() / s) * s
    r_flips = int(((ref.double() - oracle).abs() > 1e-3).sum())
    assert 10 < r_flips < 400
    same = ref.clone()
    assert judge(same, ref, oracle).ok
    recip = torch.round(x * (1 / torch.tensor(s, dtype=torch.float32))) * s
    assert judge(recip, ref, oracle).ok
    wrong = torch.round(x.double() / s + 0.3).float() * s  # biased rounding: a step off in 30 %
    assert not judge(wrong, ref, oracle).ok
    # exact ties (s a power of two): rounding half away from zero instead of to even is wrong at
    # every tie, where the reference, rounding exactly, shows no flip at all
    t = (q * 0.25).float()
    ref_t, oracle_t = torch.round(t / 0.25) * 0.25, torch.round(t.double() / 0.25) * 0.25
    assert torch.equal(ref_t.double(), oracle_t)
    half_away = (torch.sign(t) * torch.floor(t.abs() / 0.25 + 0.5)) * 0.25
    assert not judge(half_away, ref_t, oracle_t).ok
    big = ref.clone()
    big[0] += 10.0  # a "flip" far larger than any the reference shows
    assert not judge(big, ref, oracle).ok


def test_non_finite_values():
    ref = torch.tensor([1.0, float("inf"), float("nan"), 2.0])
    oracle = torch.tensor([1.0, 1e39, float("nan"), 2.0], dtype=torch.float64)  # the reference overflowed
    assert judge(ref.clone(), ref, oracle).ok
    near = torch.tensor([1.0, float("inf"), float("nan"), 2.0])
    assert judge(near, ref, oracle).ok
    assert not judge(torch.tensor([1.0, 5.0, float("nan"), 2.0]), ref, oracle).ok  # neither inf nor 1e39
    nan_out = judge(torch.tensor([float("nan"), float("inf"), float("nan"), 2.0]), ref, oracle)
    assert not nan_out.ok and "NaN/Inf value(s) where the reference is finite" in nan_out.message
    fp16_ref = torch.tensor([60000.0, float("inf")], dtype=torch.float16)
    fp16_oracle = torch.tensor([60000.0, 65000.0], dtype=torch.float64)  # finite only in float64
    assert judge(torch.tensor([60000.0, 65024.0], dtype=torch.float16), fp16_ref, fp16_oracle).ok


def test_the_tf32_policy_allows_what_operands_rounded_to_tf32_give():
    a, b, ref, oracle = _gemm(7)
    loose = _tf32(a) @ _tf32(b)
    tf32 = (_tf32(a) @ _tf32(b)).float()
    assert not judge(tf32, ref, oracle).ok
    assert judge(tf32, ref, oracle, loose=loose).ok
    bf16 = (a.bfloat16().double() @ b.bfloat16().double()).float()
    assert not judge(bf16, ref, oracle, loose=loose).ok  # bf16 is not TF32


def test_sensitivity_allows_an_accurate_element_where_terms_cancel():
    ref = torch.tensor([1.0, 1.0]).repeat(64)
    oracle = ref.double().clone()
    out = ref.clone()
    out[0] += 1e-3  # what rounding of terms ~1e4 gives, at an element the reference got exactly
    assert not judge(out, ref, oracle).ok
    sigma = torch.zeros(ref.shape, dtype=torch.float64)
    sigma[0] = 4e-3  # the oracle's move there under a four-ulp perturbation of terms ~1e4
    assert judge(out, ref, oracle, sigma=sigma).ok


def test_shape_dtype_and_empty():
    r = torch.zeros(3)
    assert not judge(torch.zeros(4), r, r.double()).ok
    assert not judge(torch.zeros(3, dtype=torch.float64), r, r.double()).ok
    assert judge(torch.zeros(0), torch.zeros(0), torch.zeros(0, dtype=torch.float64)).ok


# -- the policies ------------------------------------------------------------------------------------
def test_policies_are_named_and_checked():
    from drkernel.env.config import PRECISION_POLICIES

    assert tuple(precision.POLICIES) == PRECISION_POLICIES == ("reference", "tf32", "bf16", "fp16", "kernelbench", "rms")
    with pytest.raises(ValueError, match="unknown precision policy 'fast'"):
        EvalConfig(precision="fast").validate()
    assert EvalConfig.from_env_yaml({"correctness": {"precision": "tf32"}}).precision == "tf32"


# -- the oracle ----------------------------------------------------------------------------------------
class _Casts(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(16, 8)
        self.scale = torch.tensor(0.1)  # a plain tensor attribute, not a buffer

    def forward(self, x):
        h = self.lin(x.half()).to(torch.bfloat16)  # the reference asks for lower precision itself
        z = torch.zeros(h.shape, dtype=torch.float32)
        return torch.softmax(h.float() + z, dim=-1, dtype=torch.float32) * self.scale


def test_the_oracle_computes_in_float64_whatever_the_reference_casts_to():
    m = _Casts()
    x = torch.randn(4, 16, generator=g(2))
    out, where = evaluate_float64(widen_model(m), widen_inputs([x]))
    assert out.dtype == torch.float64 and where == "float64 on cpu"
    w, b = m.lin.weight.double(), m.lin.bias.double()
    exact = torch.softmax(x.double() @ w.T + b, dim=-1) * float(torch.tensor(0.1))
    assert torch.allclose(out, exact, rtol=1e-12, atol=0)
    with Float64Mode():
        assert torch.ones(2).dtype == torch.float64 and torch.ones(2).half().dtype == torch.float64
    assert m.lin.weight.dtype == torch.float32  # the model itself is untouched


def test_a_reference_that_cannot_run_in_float64_has_no_oracle():
    class NoDouble(torch.nn.Module):
        def forward(self, x):
            if x.dtype == torch.float64:
                raise RuntimeError("no float64 kernel")
            return x

    with pytest.raises(OracleUnavailable, match="no float64 kernel"):
        evaluate_float64(widen_model(NoDouble()), widen_inputs([torch.ones(3)]))


# -- the fused kernels ---------------------------------------------------------------------------------
def _fused_cases() -> int:
    """In a process with ``TRITON_INTERPRET=1``: random cases through drkernel.env.judge.precision_kernels
    (blocks of 16) give the torch path's verdict, message, counts and maxima."""
    from drkernel.env.judge import compare
    from drkernel.env.judge import compare_kernels
    from drkernel.env.judge import precision_kernels as kernels

    compare_kernels.applies = lambda *ts: all(str(t.dtype).removeprefix("torch.") in compare_kernels.DTYPES for t in ts)
    kernels.BLOCK = 16
    gen = g(31)
    checked = 0
    for case in range(60):
        dtype = [torch.float32, torch.bfloat16, torch.float16, torch.float64][case % 4]
        shape = [(5,), (7, 9), (33, 17), (1,), (40,)][case % 5]
        oracle = torch.randn(shape, generator=gen, dtype=torch.float64) * [1, 1e-3, 50][case % 3]
        ref = (oracle * (1 + 1e-3 * torch.randn(shape, generator=gen, dtype=torch.float64))).to(dtype)
        out = (oracle * (1 + [1e-4, 1e-2, 0][case % 3] * torch.randn(shape, generator=gen, dtype=torch.float64))).to(dtype)
        flat = out.reshape(-1)
        flipped = None
        if case % 5 == 1:
            flipped = int(torch.randint(0, flat.numel(), (1,), generator=gen))
            flat[flipped] += 1.0
        if case % 7 == 3:
            i = int(torch.randint(0, flat.numel(), (1,), generator=gen))
            ref.reshape(-1)[i] = float("inf")
            flat[i] = [float("inf"), 3.0][case % 2]
        if case % 11 == 4:
            flat[0] = float("nan")
        loose = oracle * (1 + 1e-2 * torch.randn(shape, generator=gen, dtype=torch.float64)) if case % 6 == 2 else None
        sigma = torch.rand(shape, generator=gen, dtype=torch.float64) * 1e-3 if case % 4 == 3 else None
        if sigma is not None and flipped is not None:
            sigma.reshape(-1)[flipped] = 1.0  # the oracle jumps there: the flip is excused, and leaves the norm
        compare.FUSED = True
        got = judge(out, ref, oracle, loose=loose, sigma=sigma)
        assert compare.FUSED, "the kernels failed and the torch path stood in: nothing was compared"
        compare.FUSED = False
        want = judge(out, ref, oracle, loose=loose, sigma=sigma)
        assert (got.ok, got.message) == (want.ok, want.message), (case, got, want)
        if want.precision:
            for key in ("flips", "reference_flips", "norm_ok"):
                assert got.precision[key] == want.precision[key], (case, key, got, want)
            for key in ("rms_err", "reference_rms_err", "max_err", "reference_max_err"):
                a, b = got.precision[key], want.precision[key]
                assert a == b or abs(a - b) <= 1e-9 * max(abs(a), abs(b)), (case, key, a, b)
        checked += 1
    return checked


def test_the_fused_kernels_agree_with_the_torch_path():
    import os
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    env = {**os.environ, "TRITON_INTERPRET": "1", "PYTHONPATH": str(root)}
    proc = subprocess.run([sys.executable, "-c", "import tests.env.test_precision as t; print('checked', t._fused_cases())"],
                          cwd=root, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "checked 60" in proc.stdout


def test_a_coarse_output_does_not_hide_coarse_arithmetic_inside():
    """A bf16 output rounds away what happened before the store, and the reference's own error is
    then mostly that rounding (R): a kernel may add a few times what the reference's computation adds
    beyond R, not a few times R. bf16 weights in an fp32-weight linear err ~1.5 R and fail; TF32
    products (error ~R/8 before the rounding) and one fp32 computation rounded once pass."""
    x = torch.randn(256, 512, generator=g(11)).bfloat16()
    w = torch.randn(384, 512, generator=g(12)) / 16
    ref = (x.float() @ w.T).bfloat16()
    oracle = x.double() @ w.double().T
    assert judge((x.double() @ w.double().T).bfloat16(), ref, oracle).ok
    tf32 = (x.double() @ _tf32(w).T).bfloat16()
    assert judge(tf32, ref, oracle).ok
    bf16_w = (x.double() @ w.bfloat16().double().T).bfloat16()
    got = judge(bf16_w, ref, oracle)
    assert not got.ok and "error too large" in got.message, got.precision


def test_rounding_error_is_the_distance_to_the_nearest_even_value():
    x = torch.randn(10000, generator=g(13), dtype=torch.float64).abs()
    assert torch.equal(precision.rounding_error(x, torch.float32), (x.float().double() - x).abs())
    ties = torch.tensor([1 + 2 ** -8, 1 + 3 * 2 ** -8], dtype=torch.float64)  # halfway between bf16 values
    assert precision.rounding_error(ties, torch.bfloat16).tolist() == [2 ** -8, 2 ** -8]
    assert precision.rounding_error(x, torch.float64).abs().max() == 0


def test_the_sensitivity_is_asked_only_for_near_misses():
    """Eight float64 forwards are spent on a second look only where it can change the verdict."""
    a, b, ref, oracle = _gemm(17, m=2048)
    exact = (a.double() @ b.double()).float()
    local = exact.clone()
    local[-1, -1] *= 1.0001  # an element test failure: could be an ill-conditioned element
    assert precision.near_miss(judge(local, ref, oracle))
    tf32 = judge((_tf32(a) @ _tf32(b)).float(), ref, oracle)  # ~1,000x the bound: no rounding of terms
    assert not tf32.ok and not precision.near_miss(tf32)
    assert not precision.near_miss(judge(torch.zeros(3), torch.zeros(4), torch.zeros(4, dtype=torch.float64)))


def test_a_few_flipped_steps_get_a_second_look_and_pass_only_where_the_oracle_jumps():
    """A quantiser's output (steps of 1/8) with 3 of 65,536 elements one step away where the input
    lies at a rounding boundary, the reference exact there: its norm is far past the bound (the
    reference's error is 0), yet the failure sits in a few elements, so the sensitivity is asked;
    with the oracle's jump as the sensitivity it passes, with a smooth output's it does not."""
    g = torch.Generator().manual_seed(3)
    x = torch.randn(65536, generator=g, dtype=torch.float64)
    oracle = torch.round(x * 8) / 8
    ref = oracle.float()
    out = ref.clone()
    idx = torch.tensor([11, 4_000, 60_000])
    out[idx] += 0.125
    cmp = judge(out, ref, oracle)
    assert not cmp.ok and cmp.precision["flips"] == 3 and cmp.precision["elements"] == 65536
    assert cmp.precision["rms_err"] > precision.SENSITIVITY_REACH * cmp.precision["norm_bound"]
    assert precision.near_miss(cmp)
    jump = torch.zeros(65536, dtype=torch.float64)
    jump[idx] = 0.125  # the oracle moves a whole step there under a few-ulp perturbation
    assert judge(out, ref, oracle, sigma=jump).ok
    assert not judge(out, ref, oracle, sigma=torch.full((65536,), 1e-9, dtype=torch.float64)).ok
    wide = ref.clone()
    wide[:1024] += 0.125  # a wrong tile: more than a few elements, no second look
    assert not precision.near_miss(judge(wide, ref, oracle))


def test_the_grader_out_of_device_memory_is_an_environment_failure_not_a_task_error(monkeypatch):
    from drkernel.env.tasks.prepared import PreparedTask, TrialKey
    from drkernel.env.result import EnvironmentFailure
    from drkernel.env.tasks.task import Task

    task = Task.from_source("import torch\nclass Model(torch.nn.Module):\n    def forward(self, x):\n"
                            "        raise torch.OutOfMemoryError('CUDA out of memory (simulated)')\n"
                            "def get_inputs():\n    return [torch.randn(4)]\ndef get_init_inputs():\n    return []\n",
                            name="oom")
    prepared = PreparedTask.prepare(task, "small", "cpu")
    with pytest.raises(EnvironmentFailure, match="ran out of device memory"):
        prepared.reference(0, TrialKey(seed=1))
