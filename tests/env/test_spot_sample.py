"""Checked timed outputs read back as a sample of their elements (drkernel.env.measure.spot): the grader and
the worker draw the same indices from the seed sent after the call; a kernel that leaves part of a
timed output undone is still caught, an honest one still passes."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from drkernel.env.config import EvalConfig, cpu_fast
from drkernel.env.measure.spot import (ANSWER_BYTES, SAMPLER_OPS, decode_keep, encode_keep, make_sampler, sample_index,
                                sample_size, splitmix64)

TASKS = Path(__file__).parent / "fixtures" / "tasks"
HONEST = (Path(__file__).parent / "fixtures" / "candidates" / "honest" / "relu_basic.py")

# Correct on every call the correctness trials make (7 on the CPU protocol), then, on the timed
# calls, computes the first 90% of the output and leaves the rest as it was allocated.
PARTIAL = '''
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def relu_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.maximum(tl.load(x_ptr + offs, mask=mask), 0.0), mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.calls = 0

    def forward(self, x):
        self.calls += 1
        x = x.contiguous()
        out = torch.full_like(x, 7.0)
        n = x.numel() if self.calls <= 7 else (x.numel() * 9) // 10  # 6 trials (2 at the scale ends) + determinism
        relu_kernel[(triton.cdiv(n, 256),)](x, out, n, BLOCK=256)
        return out
'''


# Red-team finding (2026-11-26): each timed output is returned half done and finished at the start
# of the next call (state in a module-level list). Kept outputs used to be written back after the
# last call, so they were judged finished; they are now copied when the grader's answer arrives.
LATE_FINISH = '''
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def relu_kernel(x_ptr, out_ptr, start, n, BLOCK: tl.constexpr):
    o = start + tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = o < n
    tl.store(out_ptr + o, tl.maximum(tl.load(x_ptr + o, mask=m), 0.0), mask=m)


Q = []


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.i = 0

    def forward(self, x):
        self.i += 1
        while Q:
            px, pout, h, n = Q.pop()
            relu_kernel[(triton.cdiv(n - h, 256),)](px, pout, h, n, BLOCK=256)
        x = x.contiguous()
        out = torch.empty_like(x)
        n = x.numel()
        h = n if self.i <= 7 else n // 2  # 6 trials (2 at the scale ends) + determinism
        relu_kernel[(triton.cdiv(h, 256),)](x, out, 0, h, BLOCK=256)
        if h < n:
            Q.append((x, out, h, n))
        return out
'''


def test_sample_size_reads_small_outputs_whole():
    assert sample_size(100, 0) == 0  # off
    assert sample_size(2 * 64, 64) == 0  # not more than twice the sample: whole
    assert sample_size(2 * 64 + 1, 64) == 64


def test_both_sides_draw_the_same_indices_from_the_seed():
    a = sample_index(10_000, 12345, 512, torch)
    b = make_sampler(torch)(10_000, 12345, 512, "cpu")  # what the worker holds
    c = sample_index(10_000, 12346, 512, torch)
    assert a.dtype == torch.int64 and a.shape == (512,) and torch.equal(a, b) and not torch.equal(a, c)
    assert int(a.min()) >= 0 and int(a.max()) < 10_000
    assert sample_index(10_000, 1, 0, torch) is None
    # uniform: each tenth of the output gets about a tenth of 100k draws
    counts = torch.bincount(sample_index(1000, 7, 100_000, torch) // 100, minlength=10)
    assert int(counts.min()) > 9_000 and int(counts.max()) < 11_000


def test_the_workers_sampler_is_bound_before_the_candidate_loads(monkeypatch):
    """Everything the worker's sampler uses is in its closure: rebinding this module's helpers and
    constants, torch's functions or ``int`` afterwards (a candidate could, through sys.modules)
    does not change which elements come back, nor reach the seed."""
    import builtins

    from drkernel.env.measure import spot

    sampler = make_sampler(torch)
    expected = sampler(1 << 30, 99, 4096)
    seen = []
    monkeypatch.setattr(spot, "_int64", lambda c: seen.append(c) or 0)
    for name in ("_GOLDEN", "_MIX1", "_MIX2"):
        monkeypatch.setattr(spot, name, 1)
    for name in SAMPLER_OPS:
        monkeypatch.setattr(torch, name, lambda *a, **k: seen.append(a) or None)
    monkeypatch.setattr(builtins, "int", type("Spy", (int,), {}))
    got = sampler(1 << 30, 99, 4096)
    monkeypatch.undo()
    assert torch.equal(got, expected) and not seen


@pytest.mark.parametrize("seed", [0, 12345, (1 << 63) - 1, (1 << 64) - 1])
def test_indices_are_splitmix64_mod_the_size_whatever_the_seed(seed):
    """torch's wrapping int64 arithmetic and masked shifts give SplitMix64 exactly (worked in Python,
    mod 2^64), for seeds that overflow every step and for an output larger than 2^32 elements."""
    for numel in (10**9 + 7, (1 << 35) + 3):
        got = sample_index(numel, seed, 2000, torch).tolist()
        assert got == [(splitmix64(seed, i) & ((1 << 63) - 1)) % numel for i in range(2000)]
    assert splitmix64(0, 0) == 0xE220A8397B1DCDAF  # SplitMix64's first output from state 0


def test_keep_answers_round_trip_and_malformed_ones_are_refused():
    msg = encode_keep((1 << 63) - 1, 1 << 20)
    assert len(msg) == ANSWER_BYTES and decode_keep(msg) == ((1 << 63) - 1, 1 << 20)
    for bad in (b"1", b"0" + msg[1:], msg + b"x"):
        with pytest.raises(ValueError):
            decode_keep(bad)


def _config(**kw) -> EvalConfig:
    return cpu_fast(EvalConfig(device="cpu")).with_overrides(**kw)


@pytest.mark.parametrize("sample", [256, 0])
def test_a_timed_output_left_partly_undone_is_caught_sampled_or_whole(sample):
    from drkernel.env.evaluation import evaluate

    r = evaluate(TASKS / "relu.py", PARTIAL, seed=3, config=_config(spot_sample=sample))
    assert r.compiled and not r.correct
    assert r.error.stage == "timing" and "timed call" in r.error.message
    assert "timed_output_mismatch" in r.hack_reasons


def test_an_honest_kernel_passes_with_sampled_checks():
    from drkernel.env.evaluation import evaluate

    r = evaluate(TASKS / "relu.py", HONEST.read_text(), seed=4, config=_config(spot_sample=64))
    assert r.correct, r.error
    assert r.details["timing"]["checked_calls"]


@pytest.mark.parametrize("sample", [64, 0])
def test_an_output_finished_after_its_call_returned_is_judged_as_returned(sample):
    from drkernel.env.evaluation import evaluate

    config = _config(spot_sample=sample, timing_trials=20, spot_checks=4, spot_rate=0.3)
    for seed in (1, 2):
        r = evaluate(TASKS / "relu.py", LATE_FINISH, seed=seed, config=config)
        assert not r.passed and "timed_output_mismatch" in r.hack_reasons, (seed, r.error)


def test_a_sampled_comparison_short_of_device_memory_falls_back_to_the_cpu_with_the_same_indices(monkeypatch):
    """The indices, the scale and the reference's sampled elements need device memory too: a device
    out of memory anywhere in a sampled comparison gives the CPU's verdict on the same elements."""
    from drkernel.env.evaluation import Evaluation
    from drkernel.env.judge import stages
    from drkernel.env.result import EvalResult

    ev = Evaluation.__new__(Evaluation)
    ev.atol, ev.rtol, ev.result = 1e-4, 1e-4, EvalResult()
    ref = torch.randn(50_000, generator=torch.Generator().manual_seed(3))
    plan = (12345, 4096)
    idx = sample_index(ref.numel(), *plan, torch)
    good, bad = ref[idx].clone(), ref[idx].clone()
    bad[7] += 1.0
    real, calls = stages.compare_outputs, []

    def short_once(*a, **k):
        calls.append(1)
        if len(calls) == 1:
            raise torch.OutOfMemoryError("CUDA out of memory (simulated)")
        return real(*a, **k)

    for got, ok in ((good, True), (bad, False)):
        calls.clear()
        monkeypatch.setattr(stages, "compare_outputs", short_once)
        assert stages.compare(ev, got, ref, sample=plan).ok is ok and len(calls) == 2
        monkeypatch.setattr(stages, "compare_outputs", real)
        assert stages.compare(ev, got, ref, sample=plan).ok is ok  # and without the shortage
