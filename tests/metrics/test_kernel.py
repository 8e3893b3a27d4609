"""Tests for drkernel/metrics/kernel.py (per-turn and best-by-turn kernel metrics, pass@k)."""

import math

import pytest
import torch

from drkernel.metrics.kernel import FAST_THRESHOLDS, kernel_metrics, pass_at_k

NAN = float("nan")

# 4 samples x 3 turns:
#   A: turn 1 correct s=1.2 | turn 2 correct s=2.0 | turn 3 incorrect
#   B: turn 1 incorrect     | turn 2 correct s=0.8 | turn 3 correct s=1.5
#   C: turn 1 correct s=1.0 | turn 2 correct s=5.0 but HACKED (counts incorrect) | turn 3 correct s=1.1
#   D: turn 1 incorrect     | turn 2 incorrect     | no turn 3
CORRECT = torch.tensor([[1, 1, 0], [0, 1, 1], [1, 1, 1], [0, 0, 0]], dtype=torch.bool)
SPEEDUP = torch.tensor([[1.2, 2.0, NAN], [NAN, 0.8, 1.5], [1.0, 5.0, 1.1], [NAN, NAN, NAN]])
HACKED = torch.tensor([[0, 0, 0], [0, 0, 0], [0, 1, 0], [0, 0, 0]], dtype=torch.bool)
EXISTS = torch.tensor([[1, 1, 1], [1, 1, 1], [1, 1, 1], [1, 1, 0]], dtype=torch.bool)


@pytest.fixture(scope="module")
def m():
    return kernel_metrics(CORRECT, SPEEDUP, HACKED, EXISTS)


def test_turn_1(m):
    # 4 samples; passing: A (1.2), C (1.0)
    assert m["kernel/turn_1/num_samples"] == 4
    assert m["kernel/turn_1/correctness_rate"] == 0.5  # 2/4
    assert m["kernel/turn_1/fast@1"] == 1.0  # A, C both >= 1.0, of 2 correct
    assert m["kernel/turn_1/fast@1_in_all"] == 0.5  # 2/4
    assert m["kernel/turn_1/fast@1.2"] == 0.5  # A only (1.2 >= 1.2), of 2 correct
    assert m["kernel/turn_1/fast@1.2_in_all"] == 0.25  # 1/4
    assert m["kernel/turn_1/fast@1.5_in_all"] == 0.0
    assert m["kernel/turn_1/geomean_speedup"] == pytest.approx(math.sqrt(1.2 * 1.0))  # 1.0954
    assert m["kernel/turn_1/hack_rate"] == 0.0


def test_turn_2_hacked_counts_incorrect(m):
    # 4 samples; passing: A (2.0), B (0.8); C's 5.0 is hacked and ignored
    assert m["kernel/turn_2/correctness_rate"] == 0.5
    assert m["kernel/turn_2/fast@1"] == 0.5  # A of {A, B}
    assert m["kernel/turn_2/fast@1_in_all"] == 0.25
    assert m["kernel/turn_2/fast@2_in_all"] == 0.25  # A: 2.0 >= 2.0
    assert m["kernel/turn_2/fast@3"] == 0.0  # C's hacked 5.0 does not count
    assert m["kernel/turn_2/geomean_speedup"] == pytest.approx(math.sqrt(2.0 * 0.8))  # 1.2649
    assert m["kernel/turn_2/hack_rate"] == 0.25  # C of 4


def test_turn_3_only_existing_samples(m):
    # D has no turn 3: 3 samples; passing: B (1.5), C (1.1)
    assert m["kernel/turn_3/num_samples"] == 3
    assert m["kernel/turn_3/correctness_rate"] == pytest.approx(2 / 3)
    assert m["kernel/turn_3/fast@1.2"] == 0.5  # B of {B, C}
    assert m["kernel/turn_3/fast@1.2_in_all"] == pytest.approx(1 / 3)
    assert m["kernel/turn_3/geomean_speedup"] == pytest.approx(math.sqrt(1.5 * 1.1))  # 1.2845


def test_best_by_turn(m):
    # best_by_turn_1 equals turn 1
    for key in ("correctness_rate", "fast@1.2_in_all", "geomean_speedup"):
        assert m[f"kernel/best_by_turn_1/{key}"] == pytest.approx(m[f"kernel/turn_1/{key}"])
    # turn <= 2: best A = max(1.2, 2.0) = 2.0, B = 0.8, C = 1.0 (hacked 5.0 excluded), D none
    assert m["kernel/best_by_turn_2/num_samples"] == 4
    assert m["kernel/best_by_turn_2/correctness_rate"] == 0.75  # A, B, C of 4
    assert m["kernel/best_by_turn_2/fast@1"] == pytest.approx(2 / 3)  # A, C of {A, B, C}
    assert m["kernel/best_by_turn_2/fast@1.2_in_all"] == 0.25  # A of 4
    assert m["kernel/best_by_turn_2/geomean_speedup"] == pytest.approx((2.0 * 0.8 * 1.0) ** (1 / 3))  # 1.1696
    # turn <= 3: A 2.0, B 1.5, C 1.1, D none
    assert m["kernel/best_by_turn_3/correctness_rate"] == 0.75
    assert m["kernel/best_by_turn_3/fast@1.2"] == pytest.approx(2 / 3)  # A, B of 3
    assert m["kernel/best_by_turn_3/fast@1.2_in_all"] == 0.5  # A, B of 4: "best across all turns"
    assert m["kernel/best_by_turn_3/fast@2_in_all"] == 0.25
    assert m["kernel/best_by_turn_3/geomean_speedup"] == pytest.approx((2.0 * 1.5 * 1.1) ** (1 / 3))  # 1.4888
    assert "kernel/best_by_turn_3/hack_rate" not in m
    # overall: 1 hacked of 11 existing turns
    assert m["kernel/hack_rate"] == pytest.approx(1 / 11)


def test_key_set():
    m = kernel_metrics(CORRECT, SPEEDUP, HACKED, EXISTS)
    names = {"num_samples", "correctness_rate", "geomean_speedup"}
    names |= {f"fast@{p:g}" for p in FAST_THRESHOLDS} | {f"fast@{p:g}_in_all" for p in FAST_THRESHOLDS}
    expected = {f"kernel/{s}_{t}/{n}" for s in ("turn", "best_by_turn") for t in (1, 2, 3) for n in names}
    expected |= {f"kernel/turn_{t}/hack_rate" for t in (1, 2, 3)} | {"kernel/hack_rate"}
    assert set(m) == expected


def test_ge_versus_strict_gt_at_exactly_1_2():
    # One correct kernel with s = 1.2 exactly: Dr. Kernel's >= counts it, KernelBench's > does not.
    correct = torch.tensor([[True], [False]])
    speedup = torch.tensor([[1.2], [NAN]])
    ge = kernel_metrics(correct, speedup)
    gt = kernel_metrics(correct, speedup, strict=True)
    assert ge["kernel/turn_1/fast@1.2_in_all"] == 0.5  # 1 of 2 samples
    assert gt["kernel/turn_1/fast@1.2_in_all"] == 0.0
    assert ge["kernel/turn_1/fast@1_in_all"] == gt["kernel/turn_1/fast@1_in_all"] == 0.5  # 1.2 > 1 either way


def test_empty_denominators_are_nan():
    # no correct kernel: fast@p among correct and the geomean are undefined
    m = kernel_metrics(torch.zeros(2, 1, dtype=torch.bool), torch.full((2, 1), NAN))
    assert m["kernel/turn_1/correctness_rate"] == 0.0
    assert math.isnan(m["kernel/turn_1/fast@1.2"]) and math.isnan(m["kernel/turn_1/geomean_speedup"])
    assert m["kernel/turn_1/fast@1.2_in_all"] == 0.0


def _loop_best(correct, speedup, exists, t, p):
    """Readable oracle: best-by-turn t fast@p_in_all."""
    hits = total = 0
    for i in range(correct.shape[0]):
        turns = [k for k in range(t) if exists[i, k]]
        if not turns:
            continue
        total += 1
        speeds = [float(speedup[i, k]) for k in turns if correct[i, k] and not math.isnan(float(speedup[i, k]))]
        hits += bool(speeds) and max(speeds) >= p
    return hits / total if total else NAN


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_best_by_turn_matches_loop(seed):
    g = torch.Generator().manual_seed(seed)
    correct = torch.rand(12, 4, generator=g) < 0.5
    speedup = torch.rand(12, 4, generator=g) * 3
    exists = torch.rand(12, 4, generator=g) < 0.8
    m = kernel_metrics(correct, speedup, turn_mask=exists)
    for t in range(1, 5):
        for p in (1.0, 1.2, 2.0):
            expected = _loop_best(correct, speedup, exists, t, p)
            got = m[f"kernel/best_by_turn_{t}/fast@{p:g}_in_all"]
            assert (math.isnan(expected) and math.isnan(got)) or got == pytest.approx(expected)


def test_pass_at_k():
    # n = 4, c = 1, k = 2: 1 - C(3,2)/C(4,2) = 1 - 3/6 = 0.5
    assert pass_at_k(4, 1, 2) == pytest.approx(0.5)
    # k = 1 is the plain success rate c/n: 1 - C(5,1)/C(8,1) = 3/8
    assert pass_at_k(8, 3, 1) == pytest.approx(3 / 8)
    # n - c < k: every draw of k contains a correct sample
    assert pass_at_k(4, 3, 2) == 1.0
    assert pass_at_k(5, 0, 3) == 0.0
    with pytest.raises(ValueError):
        pass_at_k(4, 5, 1)
    with pytest.raises(ValueError):
        pass_at_k(4, 1, 0)


def test_float32_speedups_compare_at_their_own_precision():
    # float32(1.3) = 1.2999999523 < 1.3 in float64; at float32 precision it equals the threshold.
    correct = torch.tensor([[True]])
    speedup = torch.tensor([[1.3]], dtype=torch.float32)
    m = kernel_metrics(correct, speedup, thresholds=(1.3,))
    assert m["kernel/turn_1/fast@1.3_in_all"] == 1.0
    assert kernel_metrics(correct, speedup, thresholds=(1.3,), strict=True)["kernel/turn_1/fast@1.3_in_all"] == 0.0


def test_python_list_speedups_are_float64():
    # torch.as_tensor([1.2]) is float32 (1.2000000477); the geomean must be 1.2 exactly.
    m = kernel_metrics([[True]], [[1.2]])
    assert m["kernel/turn_1/geomean_speedup"] == 1.2
    assert m["kernel/turn_1/fast@1.2_in_all"] == 1.0
