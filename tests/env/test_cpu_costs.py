"""The CPU interpreter's cost model for torch work outside the candidate's kernels, worked by hand.

On the CPU, coverage is ``1 - cost(candidate's torch ops) / cost(reference's ops)`` with each
operator costed in byte equivalents (drkernel.env.measure.profiling): bytes of its tensors, and for matrix
products and convolutions one byte per FLOP when that is larger.
"""
from __future__ import annotations

import torch

from drkernel.env.measure.profiling import op_cost


def test_elementwise_ops_cost_their_bytes():
    x = torch.randn(33, 80)
    y = torch.nn.functional.gelu(x)
    assert op_cost("gelu.default", (x,), {}, y) == 2 * 33 * 80 * 4  # read x, write y


def test_views_allocation_and_fills_are_free():
    x = torch.randn(8, 8)
    assert op_cost("view.default", (x, [64]), {}, x.view(64)) == 0.0
    assert op_cost("empty.memory_format", ([8, 8],), {}, torch.empty(8, 8)) == 0.0
    assert op_cost("fill_.Scalar", (x, 0.0), {}, x) == 0.0


def test_a_matrix_product_costs_its_flops_where_they_exceed_its_bytes():
    # fused_ops 02 at the small size: addmm(b, x, w^T), x 33x64, w 80x64
    b, x, w = torch.randn(80), torch.randn(33, 64), torch.randn(80, 64)
    out = torch.addmm(b, x, w.t())
    flops = 2 * 33 * 64 * 80  # 337,920
    nbytes = (80 + 33 * 64 + 64 * 80 + 33 * 80) * 4  # 39,808
    assert flops > nbytes
    assert op_cost("addmm.default", (b, x, w.t()), {}, out) == flops
    # ... so the product is the bulk of the reference's cost, as it is of an H100's time at full size:
    epilogue = 2 * (2 * 33 * 80 * 4)  # gelu and the scale, each reads and writes 33x80 floats
    assert flops / (flops + epilogue) > 0.85


def test_a_tiny_product_costs_its_bytes():
    a, b = torch.randn(2, 1), torch.randn(1, 2)
    out = a @ b
    assert op_cost("mm.default", (a, b), {}, out) == (2 + 2 + 4) * 4  # 8 FLOPs < 32 bytes


def test_an_operator_whose_work_the_bytes_do_not_bound_fails_closed_for_the_candidate():
    from drkernel.env.measure.profiling import UNBOUNDED

    x1, x2, w = torch.randn(6, 5), torch.randn(6, 1), torch.randn(4, 5, 1)
    out = torch.nn.functional.bilinear(x1, x2, w)
    args = (x1, x2, w, [], [], [], [], 1)
    bytes_only = op_cost("_trilinear.default", args, {}, out)
    assert 0 < bytes_only < UNBOUNDED  # the reference's side: its bytes
    assert op_cost("_trilinear.default", args, {}, out, torch.ops.aten._trilinear.default, bounded_only=True) \
        == UNBOUNDED
    # torch's own tags and the linear-work list keep honest glue priced by its bytes
    t = torch.randn(8, 8)
    assert op_cost("tanh.default", (t,), {}, t.tanh(), torch.ops.aten.tanh.default, bounded_only=True) == 2 * 64 * 4
    s = torch.softmax(t, -1)
    assert op_cost("_softmax.default", (t, -1, False), {}, s, torch.ops.aten._softmax.default,
                   bounded_only=True) == 2 * 64 * 4
