"""Triton's interpreter (``TRITON_INTERPRET=1``, the CPU) brought closer to a GPU, in the candidate's process.

The interpreter runs a kernel's body in NumPy. Where Triton 3.6's interpreter computes something a
GPU does not, an honest kernel was graded incorrect on the CPU (or a GPU-only shortcut passed);
:func:`install` replaces those few builder methods, in the candidate's worker on the CPU only
(never on a GPU, where nothing here is imported), before the candidate's module is imported (and
before the seal and the fingerprint take their snapshots, which then watch the replacements):

* **bf16 conversions** (``cast_impl``, ``create_fp_to_fp``). The interpreter truncated fp32 -> bf16
  (and rounded a tie upwards with a lost carry when asked for ``rtne``), and cast bf16 to and from
  every type but fp32 through its raw 16 bits as an integer. A GPU rounds to nearest even
  (``cvt.rn.bf16.f32``). Now: fp32/fp16 -> bf16 rounds to nearest even (``rtz``: towards zero), fp64
  -> bf16 rounds once (through fp32 rounded to odd), integers through fp64; bf16 -> anything goes
  through its exact fp32 value. Bit for bit ``tensor.to(torch.bfloat16)``. Other casts are NumPy's
  (already round to nearest even, as a GPU).
* **bf16 arithmetic** (the float operations of :data:`BF16_OPS`: ``+ - * /``, min/max, fma, math
  functions, comparisons). The interpreter applied them to bf16's raw 16 bits as integers
  (``a * b`` gave ~1e31). Now on the fp32 values, the result rounded once to bf16 (a GPU's bf16
  operation rounds its exact result once; fp32's 24 bits make the double rounding harmless for
  ``+ - * /`` and sqrt; an fma Triton contracts on a GPU rounds once where this rounds twice).
  Reductions' fast paths (``tl.sum``, ``tl.max``/``tl.min``/argmax/argmin) on bf16 likewise: on
  the values, a sum in fp32 rounded once (a GPU's order and roundings differ by bf16 ulps).
* **``tl.dot``** (``create_dot``). bf16 operands were multiplied as 16-bit *integers* (~1e10); fp16
  ones accumulated in the output type. Now bf16 and fp16 operands are multiplied exactly and
  accumulated in fp32 (an fp16 ``out_dtype`` rounds once at the end), as a tensor core does. fp32
  operands follow ``input_precision`` as Triton 3.6 lowers it for NVIDIA (sm_80+):

  - ``tf32`` (the default): no conversion is emitted; the MMA reads the fp32 registers and ignores
    the low 13 mantissa bits (PTX: wgmma "will truncate lower 13 bits"): each operand is truncated
    to TF32 (10 explicit mantissa bits, towards zero), the products are exact in fp32 and summed in
    fp32. The interpreter computed full fp32: a TF32 shortcut that fails on a GPU passed here.
  - ``tf32x3`` (Triton's F32DotTC pass): ``hi = cvt.rna.tf32.f32(x)`` (nearest, ties away),
    ``lo = x - hi``; ``dot(a_lo, b_hi) + dot(a_hi, b_lo)`` (each a TF32 dot: ``lo`` truncated), NaNs
    of that sum zeroed, ``+ dot(a_hi, b_hi)``, ``+ acc``.
  - ``bf16x3`` / ``bf16x6`` (the same pass; the interpreter refused them): each operand split into
    bf16 parts ``hi, mid, lo`` (each the nearest-even bf16 of what the previous parts left);
    bf16x6: ``mid*mid + lo*hi + hi*lo``, then both: ``+ mid*hi + hi*mid``, NaNs zeroed,
    ``+ hi*hi``, ``+ acc``; every product exact, sums in fp32.
  - ``ieee``: plain fp32.

  fp64, int8 and fp8 operands are the interpreter's own (fp8 through fp16, exact).
* **``@triton.autotune``** with more than one config benchmarked each config through the active
  GPU driver, and failed ("0 active drivers"). On the CPU a config's time means nothing: the
  autotuner runs no benchmark and takes **the first config** (after the kernel's own pruning), as
  if it were the fastest; the other configs are not run. Each choice is reported
  (:func:`install`'s ledger; the worker's ``RunReply.interpreter``). A GPU may choose another
  config: a kernel whose other configs are wrong is judged right here only for the first.
* **What the interpreter cannot run** (``tl.inline_asm_elementwise``, extern elementwise calls):
  recorded here before the interpreter's own error is raised, so the worker reports the call as
  "cannot be judged on the CPU; grade on a GPU", never as incorrect.

Accumulation order still differs from a GPU's (NumPy's BLAS sums in its own order): the same
size of rounding as the GPU's, not the same bits.

Nothing here refers to the harness: the replacements close over NumPy, Triton and two record lists
behind a generator (:func:`drkernel.env.guards.audit.sealed_ledger`): they can add records, and only the
worker, which holds the ledger itself, reads them.
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np

#: The input precisions Triton 3.6 accepts for an fp32 ``tl.dot`` on NVIDIA (the interpreter
#: accepted only the first three).
DOT_PRECISIONS = ("tf32", "tf32x3", "ieee", "bf16x3", "bf16x6")

#: The interpreter's float operations (builder methods) that computed on bf16's raw bits.
BF16_OPS = ("create_fadd", "create_fsub", "create_fmul", "create_fdiv", "create_frem", "create_precise_divf",
            "create_minimumf", "create_minnumf", "create_maximumf", "create_maxnumf", "create_clampf", "create_fma",
            "create_cos", "create_sin", "create_exp", "create_exp2", "create_log", "create_log2", "create_sqrt",
            "create_precise_sqrt", "create_rsqrt", "create_floor", "create_ceil", "create_erf", "create_fneg",
            "create_fcmpOEQ", "create_fcmpONE", "create_fcmpOGT", "create_fcmpOGE", "create_fcmpOLT",
            "create_fcmpOLE", "create_fcmpUEQ", "create_fcmpUNE", "create_fcmpUGT", "create_fcmpUGE",
            "create_fcmpULT", "create_fcmpULE", "create_fcmpORD", "create_fcmpUNO")

UNJUDGEABLE = "cannot be judged on the CPU; grade on a GPU"
"""The start of the message of a call that failed on something the interpreter cannot run."""

POLICY = ("Triton interpreter (CPU) made to compute as a GPU does: bf16 conversions round to nearest even; "
          "tl.dot on bf16/fp16 multiplies exactly and accumulates in fp32; fp32 tl.dot follows input_precision "
          "(tf32: operands truncated to TF32; tf32x3, bf16x3, bf16x6: Triton's split; ieee: fp32); "
          "@triton.autotune runs the first config (after pruning) without benchmarking, the others are not run")


# -- conversions (NumPy arrays of bits) -----------------------------------------------------------------
def _u32(x: Any) -> np.ndarray:
    """fp32 values as their bits (any shape, 0-d included)."""
    a = np.asarray(x, dtype=np.float32)
    return (a if a.flags.c_contiguous else a.copy()).view(np.uint32)


def f32_to_bf16_bits(x: np.ndarray, rtz: bool = False) -> np.ndarray:
    """fp32 values -> bf16 bits (uint16): nearest, ties to even (``rtz``: towards zero). NaN stays NaN."""
    u = _u32(x)
    nan = (u & np.uint32(0x7FFFFFFF)) > np.uint32(0x7F800000)
    if rtz:
        r = u >> np.uint32(16)
    else:
        with np.errstate(over="ignore"):
            r = (u + (np.uint32(0x7FFF) + ((u >> np.uint32(16)) & np.uint32(1)))) >> np.uint32(16)
    r = np.where(nan, (u >> np.uint32(16)) | np.uint32(0x0040), r)
    return r.astype(np.uint16)


def bf16_bits_to_f32(bits: np.ndarray) -> np.ndarray:
    """bf16 bits (uint16) -> their exact fp32 values."""
    return (np.asarray(bits).astype(np.uint32) << np.uint32(16)).view(np.float32)


def f64_to_f32_odd(x: np.ndarray) -> np.ndarray:
    """fp64 -> fp32 rounded to odd (towards zero, the last bit set when inexact): rounding that to
    bf16 (or any format at least two bits narrower) is the single rounding of the fp64 value."""
    x = np.asarray(x, dtype=np.float64)
    with np.errstate(over="ignore", invalid="ignore"):
        f = x.astype(np.float32)
        over = np.abs(f.astype(np.float64)) > np.abs(x)  # rounded away from zero: one step back
        f = np.where(over & np.isfinite(x), np.nextafter(f, np.float32(0)), f).astype(np.float32)
        inexact = (f.astype(np.float64) != x) & np.isfinite(x)
    u = _u32(f)
    return np.where(inexact, u | np.uint32(1), u).astype(np.uint32).view(np.float32)


def to_bf16_bits(data: np.ndarray, rtz: bool = False) -> np.ndarray:
    """Any interpreter value (not bf16 bits) -> bf16 bits, rounded once."""
    if data.dtype == np.float32:
        return f32_to_bf16_bits(data, rtz)
    if data.dtype == np.float16:
        return f32_to_bf16_bits(data.astype(np.float32), rtz)  # exact, then one rounding
    wide = data.astype(np.float64)
    if rtz:
        with np.errstate(over="ignore", invalid="ignore"):
            f = wide.astype(np.float32)
            f = np.where(np.abs(f.astype(np.float64)) > np.abs(wide), np.nextafter(f, np.float32(0)), f)
        return f32_to_bf16_bits(f.astype(np.float32), rtz=True)
    return f32_to_bf16_bits(f64_to_f32_odd(wide))


def tf32_truncate(x: np.ndarray) -> np.ndarray:
    """fp32 -> TF32 as an MMA reads it: the low 13 mantissa bits dropped (NaN kept a NaN)."""
    u = _u32(x)
    nan = (u & np.uint32(0x7FFFFFFF)) > np.uint32(0x7F800000)
    r = np.where(nan, u | np.uint32(0x00400000), u & np.uint32(0xFFFFE000))
    return r.astype(np.uint32).view(np.float32)


def tf32_round_away(x: np.ndarray) -> np.ndarray:
    """fp32 -> TF32 as ``cvt.rna.tf32.f32``: nearest, ties away from zero (NaN and inf kept)."""
    u = _u32(x)
    special = (u & np.uint32(0x7F800000)) == np.uint32(0x7F800000)
    with np.errstate(over="ignore"):
        r = (u + np.uint32(0x1000)) & np.uint32(0xFFFFE000)
    r = np.where(special, np.where((u & np.uint32(0x7FFFFF)) != 0, u | np.uint32(0x00400000), u), r)
    return r.astype(np.uint32).view(np.float32)


def _bf16_parts(x: np.ndarray, n: int) -> list[np.ndarray]:
    """Triton's splitF32: ``n`` bf16 parts (as fp32 values), each the nearest-even bf16 of the rest."""
    parts = []
    for i in range(n):
        part = bf16_bits_to_f32(f32_to_bf16_bits(x))
        if i != n - 1:
            x = (x - part).astype(np.float32)
        parts.append(part)
    return parts


def _mm(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """fp32 products summed in fp32 (operands whose products are exact in fp32)."""
    return np.matmul(a.astype(np.float32, copy=False), b.astype(np.float32, copy=False))


def _zero_nans(x: np.ndarray) -> np.ndarray:
    return np.where(np.isnan(x), np.float32(0), x).astype(np.float32)


def dot_f32(a: np.ndarray, b: np.ndarray, precision: str) -> np.ndarray:
    """``tl.dot`` of fp32 operands without the accumulator, as Triton 3.6 computes it on NVIDIA."""
    a = np.asarray(a, dtype=np.float32)
    b = np.asarray(b, dtype=np.float32)
    with np.errstate(all="ignore"):
        if precision == "ieee":
            return _mm(a, b)
        if precision == "tf32":
            return _mm(tf32_truncate(a), tf32_truncate(b))
        if precision == "tf32x3":
            a_hi, b_hi = tf32_round_away(a), tf32_round_away(b)
            a_lo, b_lo = (a - a_hi).astype(np.float32), (b - b_hi).astype(np.float32)
            small = _mm(tf32_truncate(a_lo), b_hi) + _mm(a_hi, tf32_truncate(b_lo))
            return (_zero_nans(small.astype(np.float32)) + _mm(a_hi, b_hi)).astype(np.float32)
        if precision in ("bf16x3", "bf16x6"):
            n = 2 if precision == "bf16x3" else 3
            (ah, am, *al), (bh, bm, *bl) = _bf16_parts(a, n), _bf16_parts(b, n)
            acc = np.zeros((*a.shape[:-1], b.shape[-1]), dtype=np.float32)
            if n == 3:
                acc = acc + _mm(am, bm) + _mm(al[0], bh) + _mm(ah, bl[0])
            acc = (acc + _mm(am, bh) + _mm(ah, bm)).astype(np.float32)
            return (_zero_nans(acc) + _mm(ah, bh)).astype(np.float32)
    raise ValueError(f"unknown input precision {precision!r}")


# -- installation ------------------------------------------------------------------------------------------
_installed: list[Callable[[Any], Any]] = []


def install() -> Callable[[Any], Any]:
    """Replace the interpreter's methods listed in the module docstring (once per process; again:
    the same ledger). Returns the ledger (:func:`drkernel.env.guards.audit.sealed_ledger`'s ``send``):
    ``records(ledger)`` is everything recorded so far, append-only. The worker holds it in its own
    frame and reads it with ``send(("read",))`` alone (a generator's code): no function of this
    module, whose closures the candidate could reach, runs in the harness's steps. Call only where
    Triton interprets (``TRITON_INTERPRET=1``)."""
    if _installed:
        return _installed[0]
    import triton.language as tl
    from triton._C.libtriton import ir
    from triton.runtime import autotuner as at
    from triton.runtime import interpreter as it

    from drkernel.env.guards.audit import sealed_ledger

    ledger = sealed_ledger()  # records ("autotune" | "unjudgeable", text); read by the worker alone
    Builder, Handle = it.InterpreterBuilder, it.TensorHandle
    bf16, fp16, fp32 = tl.bfloat16, tl.float16, tl.float32
    np_dtype = it._get_np_dtype
    rtz_mode = ir.ROUNDING_MODE.RTZ
    names = {v: k.lower() for k, v in ir.INPUT_PRECISION.__members__.items()}
    original_cast, original_fp_to_fp, original_dot = Builder.cast_impl, Builder.create_fp_to_fp, Builder.create_dot

    def bf16_cast(src: Any, dst_scalar: Any, rtz: bool) -> Any:
        """A cast with bf16 on either side (None: not one)."""
        s = src.dtype.scalar
        if s == bf16 and dst_scalar == bf16:
            return Handle(src.data.copy(), bf16)
        if dst_scalar == bf16 and not s.is_ptr():
            data = src.data.astype(np.float64) if src.data.dtype == np.bool_ else src.data
            return Handle(to_bf16_bits(np.asarray(data), rtz=rtz), bf16)
        if s == bf16:
            wide = bf16_bits_to_f32(src.data)
            return Handle(wide.astype(np_dtype(dst_scalar)), dst_scalar)
        return None

    def cast_impl(self: Any, src: Any, dst_type: Any) -> Any:
        out = bf16_cast(src, dst_type.scalar, rtz=False)
        return out if out is not None else original_cast(self, src, dst_type)

    def create_fp_to_fp(self: Any, src: Any, dst_type: Any, rounding_mode: Any) -> Any:
        s, d = src.dtype.scalar, dst_type.scalar
        if bf16 in (s, d) and all(t in (bf16, fp16, fp32, tl.float64) for t in (s, d)):
            return bf16_cast(src, d, rtz=rounding_mode == rtz_mode)
        return original_fp_to_fp(self, src, dst_type, rounding_mode)

    def create_dot(self: Any, a: Any, b: Any, d: Any, input_precision: Any, max_num_imprecise_acc: Any) -> Any:
        kind, acc = a.dtype.scalar, d.data
        if kind in (bf16, fp16):
            x = bf16_bits_to_f32(a.data) if kind == bf16 else a.data.astype(np.float32)
            y = bf16_bits_to_f32(b.data) if kind == bf16 else b.data.astype(np.float32)
            with np.errstate(all="ignore"):
                out = _mm(x, y) + acc.astype(np.float32)
            return Handle(out.astype(acc.dtype), d.dtype.scalar)
        if kind == fp32 and acc.dtype == np.float32:
            precision = names.get(input_precision, "tf32")
            with np.errstate(all="ignore"):
                out = (dot_f32(a.data, b.data, precision) + acc).astype(np.float32)
            return Handle(out, d.dtype.scalar)
        return original_dot(self, a, b, d, input_precision, max_num_imprecise_acc)

    def refuse(what: str) -> Callable[..., Any]:
        def unsupported(self: Any, *args: Any, **kwargs: Any) -> Any:
            ledger(("add", ("unjudgeable", f"{what} does not run in Triton's interpreter")))
            raise NotImplementedError(f"{what} is not supported in interpreter mode ({UNJUDGEABLE})")

        unsupported.__name__ = f"create_{what.replace(' ', '_')}"
        return unsupported

    def bf16_through_fp32(name: str, original: Callable[..., Any]) -> Callable[..., Any]:
        """A float operation on bf16 handles: on their fp32 values, the result rounded back to bf16
        (nearest even: a GPU's bf16 add/mul/... rounds its exact result once, and fp32's 24 bits
        hold it exactly or round it harmlessly). The interpreter computed on the raw 16-bit integers."""

        def on_values(self: Any, *args: Any) -> Any:
            if not any(type(x) is Handle and x.dtype == bf16 for x in args):
                return original(self, *args)
            wide = [Handle(bf16_bits_to_f32(x.data), fp32) if type(x) is Handle and x.dtype == bf16 else x
                    for x in args]
            out = original(self, *wide)
            if type(out) is Handle and out.dtype == fp32:  # (a comparison's bools keep the operands' type, as before)
                return Handle(f32_to_bf16_bits(out.data) if out.data.dtype == np.float32 else out.data, bf16)
            return out

        on_values.__name__ = name
        return on_values

    for name in BF16_OPS:
        original = getattr(Builder, name, None)
        if original is not None:
            setattr(Builder, name, bf16_through_fp32(name, original))
    Builder.cast_impl = cast_impl
    # reductions' fast paths (np.sum, np.max... on the raw bits): on the values, rounded once
    Reduce = it.ReduceOps
    original_sum, original_min_max = Reduce.sum, Reduce.min_max

    def reduce_sum(self: Any, input: Any) -> Any:
        if input.dtype != bf16:
            return original_sum(self, input)
        total = np.sum(bf16_bits_to_f32(input.handle.data), axis=self.axis, keepdims=self.keep_dims,
                       dtype=np.float32)
        return self.to_tensor(f32_to_bf16_bits(total), input.dtype)

    def reduce_min_max(self: Any, input: Any, val_reduce_op: Any, idx_reduce_op: Any = None) -> Any:
        value = input[0] if isinstance(input, tuple) else input
        if value.dtype != bf16:
            return original_min_max(self, input, val_reduce_op, idx_reduce_op)
        wide = tl.tensor(Handle(bf16_bits_to_f32(value.handle.data), fp32), value.type.with_element_ty(fp32))
        out = original_min_max(self, wide, val_reduce_op, idx_reduce_op)
        narrow = lambda t: self.to_tensor(f32_to_bf16_bits(t.handle.data), bf16)  # exact: bf16 values
        if isinstance(out, tuple):
            return narrow(out[0]), out[1]
        return narrow(out) if val_reduce_op else out

    Reduce.sum, Reduce.min_max = reduce_sum, reduce_min_max
    Builder.create_fp_to_fp = create_fp_to_fp
    Builder.create_dot = create_dot
    Builder.create_inline_asm = refuse("inline asm")
    Builder.create_extern_elementwise = refuse("extern elementwise")
    original_init = Builder.__init__

    def __init__(self: Any) -> None:  # builders made later (tensor descriptors) accept them too
        original_init(self)
        _widen(self)

    Builder.__init__ = __init__
    _widen(it.interpreter_builder)

    # -- the autotuner: no benchmark, the first config --------------------------------------------------
    def no_bench(kernel_call: Any, quantiles: Any = None, **_: Any) -> list[float]:
        return [0.0, 0.0, 0.0]  # equal times: builtins.min keeps the first config

    original_run = at.Autotuner.run

    def run(self: Any, *args: Any, **kwargs: Any) -> Any:
        known = len(self.cache)
        out = original_run(self, *args, **kwargs)
        if len(self.configs) > 1 and len(self.cache) > known:
            name = getattr(getattr(self, "base_fn", None), "__name__", "?")
            ledger(("add", ("autotune", f"{name}: {len(self.configs)} configs, ran the first ({self.best_config}) "
                                        "without benchmarking; the others were not run")))
        return out

    at.Autotuner.do_bench = property(lambda self: no_bench)
    at.Autotuner.run = run

    _installed.append(ledger)
    return ledger


def records(ledger: Callable[[Any], Any]) -> dict[str, list[str]]:
    """What :func:`install`'s ledger holds: ``{"autotune": [...], "unjudgeable": [...]}``."""
    out: dict[str, list[str]] = {"autotune": [], "unjudgeable": []}
    for item in ledger(("read",)) or []:
        if type(item) is tuple and len(item) == 2 and type(item[0]) is str and type(item[1]) is str:
            out.setdefault(item[0], []).append(item[1])
    return out


def _widen(builder: Any) -> None:
    """The NVIDIA backend's input precisions on an interpreter builder (its options are frozen)."""
    import dataclasses

    opts = builder.options
    allowed = tuple(dict.fromkeys(tuple(opts.allowed_dot_input_precisions) + DOT_PRECISIONS))
    builder.options = dataclasses.replace(opts, allowed_dot_input_precisions=allowed)


def interpreting() -> bool:
    """Whether Triton runs kernels in its interpreter in this process."""
    try:
        import triton

        return bool(triton.knobs.runtime.interpret)
    except Exception:  # noqa: BLE001 - no Triton, or an older one: the environment variable
        import os

        return os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


__all__ = ["install", "records", "interpreting", "dot_f32", "f32_to_bf16_bits", "bf16_bits_to_f32", "to_bf16_bits",
           "tf32_truncate", "tf32_round_away", "UNJUDGEABLE", "POLICY", "DOT_PRECISIONS"]
