"""The correctness trials' input variants: every input the task declares varies, within its domain.

A kernel that ignores an input, or bakes in the value the task happens to pass, must fail some
trial; the transforms themselves must keep the inputs valid (indices in range, structure of fixed
positions kept) and be the same function of the seed on both sides of the grader.
"""
from __future__ import annotations

import pytest
import torch

from drkernel.env.tasks.task import distribution_scale, scalar_scale, transform_inputs


def _inputs():
    g = torch.Generator().manual_seed(0)
    return [
        torch.randn(4, 5, generator=g),           # 0 float tensor
        torch.rand(4, 5, generator=g) > 0.5,      # 1 bool mask
        torch.randint(0, 7, (12,), generator=g),  # 2 integer indices
        0.7,                                      # 3 Python float (a temperature)
        3,                                        # 4 Python int (a dimension)
        True,                                     # 5 Python bool (a flag)
        torch.tensor(5),                          # 6 0-d integer tensor (nothing to shuffle)
    ]


def test_native_is_the_draw_itself():
    xs = _inputs()
    assert transform_inputs(xs, "native", seed=11) is xs


def test_negated_flips_signs_and_masks_and_shuffles_indices_but_keeps_python_scalars():
    xs = _inputs()
    out = transform_inputs(xs, "negated", seed=11)
    assert torch.equal(out[0], -xs[0])
    assert torch.equal(out[1], ~xs[1])
    assert sorted(out[2].tolist()) == sorted(xs[2].tolist())  # same multiset: indices stay in range
    assert out[3] == 0.7 and out[4] == 3 and out[5] is True   # a sign flip is not a safe domain for scalars
    assert torch.equal(out[6], xs[6])


def test_scaled_varies_floats_tensors_and_python_floats_independently():
    xs = _inputs()
    for seed in range(20):
        out = transform_inputs(xs, "scaled", seed=seed)
        s, t = distribution_scale(seed), scalar_scale(seed)
        assert 1e-2 <= s <= 1e2 and 0.5 <= t <= 2.0
        assert torch.equal(out[0], xs[0] * s)
        assert sorted(out[2].tolist()) == sorted(xs[2].tolist())
        assert type(out[3]) is float and out[3] == pytest.approx(0.7 * t)
        assert out[4] == 3 and type(out[4]) is int and out[5] is True  # ints and bools are never changed
    # the float argument takes many values over the trials' seeds, not one baked-in constant
    values = {round(transform_inputs(xs, "scaled", seed=seed)[3], 9) for seed in range(50)}
    assert len(values) == 50
    assert min(values) < 0.7 * 0.75 and max(values) > 0.7 * 1.33
    # and its factor is not the tensors' factor
    assert any(abs(scalar_scale(k) - distribution_scale(k)) > 1e-3 for k in range(10))


def test_same_seed_same_variant_on_both_sides():
    a = transform_inputs(_inputs(), "scaled", seed=123)
    b = transform_inputs(_inputs(), "scaled", seed=123)
    assert all(torch.equal(x, y) if isinstance(x, torch.Tensor) else x == y for x, y in zip(a, b))


def test_fixed_positions_are_left_as_drawn():
    xs = _inputs()
    out = transform_inputs(xs, "scaled", seed=5, fixed=(1, 2, 3))
    assert torch.equal(out[1], xs[1]) and torch.equal(out[2], xs[2]) and out[3] == 0.7
    assert not torch.equal(out[0], xs[0])


def test_unknown_distribution_is_named():
    with pytest.raises(ValueError, match="unknown distribution 'flipped'"):
        transform_inputs(_inputs(), "flipped", seed=0)
