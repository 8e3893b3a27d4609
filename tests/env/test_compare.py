"""The scale-aware tolerance: |out - ref| <= atol*rms(ref) + rtol*|ref| (fp32 defaults 1e-4)."""

import torch

from drkernel.env.compare import aliases, compare_outputs, lazy_output_reason

ATOL = RTOL = 1e-4


def test_fp32_reordering_passes():
    g = torch.Generator().manual_seed(0)
    a, b = torch.randn(128, 512, generator=g), torch.randn(512, 64, generator=g)
    ref = a @ b
    reordered = (a[:, :256] @ b[:256] + a[:, 256:] @ b[256:])  # different summation order
    assert compare_outputs(reordered, ref, ATOL, RTOL).ok


def test_all_zero_output_fails_when_true_output_is_tiny():
    # a softmax over 3000 columns: values ~3e-4, far below KernelBench's atol=1e-2
    x = 0.5 * torch.randn(64, 3000, generator=torch.Generator().manual_seed(1))
    ref = torch.softmax(x, dim=1)
    assert float(ref.max()) < 1e-2
    cmp = compare_outputs(torch.zeros_like(ref), ref, ATOL, RTOL)
    assert not cmp.ok and "out of tolerance" in cmp.message


def test_half_precision_and_bf16_fail():
    g = torch.Generator().manual_seed(2)
    a, b = torch.randn(64, 256, generator=g), torch.randn(256, 64, generator=g)
    ref = a @ b
    assert not compare_outputs((a.half().float() @ b.half().float()), ref, ATOL, RTOL).ok
    assert not compare_outputs((a.bfloat16() @ b.bfloat16()).float(), ref, ATOL, RTOL).ok


def test_tf32_style_rounding_fails():
    # TF32 keeps 10 mantissa bits: emulate by rounding the operands, accumulate in fp32
    def tf32(t):
        bits = t.view(torch.int32)
        return ((bits + 0x1000) & ~0x1FFF).view(torch.float32)
    g = torch.Generator().manual_seed(3)
    a, b = torch.randn(64, 1024, generator=g), torch.randn(1024, 64, generator=g)
    assert not compare_outputs(tf32(a) @ tf32(b), a @ b, ATOL, RTOL).ok


def test_nan_and_inf_never_pass():
    ref = torch.ones(10)
    out = ref.clone(); out[3] = float("nan")
    assert not compare_outputs(out, ref, ATOL, RTOL).ok
    out = ref.clone(); out[0] = float("inf")
    assert not compare_outputs(out, ref, ATOL, RTOL).ok


def test_nonfinite_reference_must_be_matched_exactly():
    ref = torch.tensor([1.0, float("inf"), float("nan")])
    assert compare_outputs(ref.clone(), ref, ATOL, RTOL).ok
    assert not compare_outputs(torch.tensor([1.0, 1e30, float("nan")]), ref, ATOL, RTOL).ok


def test_shape_and_dtype_mismatch():
    assert "shape" in compare_outputs(torch.ones(3, 1), torch.ones(3), ATOL, RTOL).message
    assert "dtype" in compare_outputs(torch.ones(3, dtype=torch.float64), torch.ones(3), ATOL, RTOL).message


def test_integer_outputs_compare_exactly():
    assert compare_outputs(torch.tensor([1, 2]), torch.tensor([1, 2]), ATOL, RTOL).ok
    assert not compare_outputs(torch.tensor([1, 3]), torch.tensor([1, 2]), ATOL, RTOL).ok


def test_aliasing_and_lazy_output():
    x = torch.randn(4, 4)
    assert aliases(x.view(-1), [x]) and aliases(x[1:], [x]) and not aliases(x.clone(), [x])

    class Sub(torch.Tensor):
        pass

    assert "not a plain torch.Tensor" in lazy_output_reason(x.as_subclass(Sub), "cpu")
    assert lazy_output_reason(x, "cpu") is None
    assert "meta" in lazy_output_reason(torch.empty(3, device="meta"), "cpu")


def _whole(monkeypatch, fn, *args, **kwargs):
    """``fn`` with the comparison's chunk larger than any tensor here (one pass)."""
    import drkernel.env.compare as compare

    monkeypatch.setattr(compare, "CHUNK", 1 << 40)
    try:
        return fn(*args, **kwargs)
    finally:
        monkeypatch.undo()


def test_the_comparison_in_chunks_decides_and_reports_as_in_one_pass(monkeypatch):
    """Bounded memory (compare.CHUNK elements per pass) changes nothing a caller sees: verdict,
    errors, mismatch fraction and the worst element's values, with NaN/Inf, a per-element
    allowance, a given scale, a strided reference and complex outputs."""
    import drkernel.env.compare as compare
    from drkernel.env.compare import reference_rms

    g = torch.Generator().manual_seed(7)
    ref = torch.randn(37, 29, generator=g)
    good = ref + 1e-6 * torch.randn(37, 29, generator=g)
    bad = good.clone()
    bad[5, 3], bad[30, 20] = bad[5, 3] + 0.5, bad[30, 20] - 2.0  # the worst one in a later chunk
    ref_nan = ref.clone()
    ref_nan[2, 2], ref_nan[20, 7] = float("nan"), float("inf")
    out_nan_ok = good.clone()
    out_nan_ok[2, 2], out_nan_ok[20, 7] = float("nan"), float("inf")
    out_nan_bad = good.clone()
    out_nan_bad[20, 7] = 1.0
    out_inf_where_finite = good.clone()
    out_inf_where_finite[9, 9] = float("inf")
    strided = ref.t().contiguous().t()  # same values, column-major
    cref = torch.randn(41, 3, dtype=torch.complex64, generator=g)
    cases = [
        (good, ref, {}), (bad, ref, {}), (bad, ref, {"scale": 3.0}), (out_nan_ok, ref_nan, {}),
        (out_nan_bad, ref_nan, {}), (out_inf_where_finite, ref, {}), (good, strided, {}),
        (bad, ref, {"allowance": torch.full((37, 29), 2.5, dtype=torch.float64)}),
        (cref + 1e-6, cref, {}), (cref * 1.1, cref, {}),
    ]
    monkeypatch.setattr(compare, "CHUNK", 64)  # 1073 elements: 17 chunks
    chunked = [compare_outputs(o, r, ATOL, RTOL, **kw) for o, r, kw in cases]
    rms_chunked = reference_rms(ref_nan)
    whole = [_whole(monkeypatch, compare_outputs, o, r, ATOL, RTOL, **kw) for o, r, kw in cases]
    assert [c.ok for c in whole] == [True, False, False, True, False, False, True, True, True, False]
    for a, b in zip(chunked, whole):
        assert a.ok == b.ok and a.message == b.message
        for field in ("max_abs_err", "max_rel_err", "mismatch_frac"):
            x, y = getattr(a, field), getattr(b, field)
            assert (x is None and y is None) or x == y or abs(x - y) <= 1e-12 * max(1.0, abs(y))
    assert f"worst: got {float(bad[30, 20]):.6g}, expected {float(ref[30, 20]):.6g}" in chunked[1].message
    assert abs(rms_chunked - _whole(monkeypatch, reference_rms, ref_nan)) < 1e-12
