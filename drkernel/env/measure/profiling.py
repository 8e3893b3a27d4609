"""What the candidate's calls did besides its own Triton kernels (runs in the worker).

**GPU.** The CUDA profiler (CUPTI through torch's kineto) runs from before the candidate's module is
imported until the worker's last request, so every call the candidate ever sees runs under it (the
profiler's state tells a candidate nothing about which calls are timed). The worker hands the raw
device records back (:func:`device_records`: name, start, duration, stream of every kernel, copy and
memset); the grader cuts them into calls at the harness's fence kernels and decides what is whose
(:mod:`drkernel.env.measure.attribution`). Reading the records uses the profiler's C++ accessors captured
before the candidate loaded.

**CPU (Triton's interpreter).** Interpreted Triton is thousands of times slower than torch's
compiled operators, so time shares mean nothing. Instead :class:`ForeignWork`, a torch dispatch mode
around every call, sees each aten operator and asks who ran it (:func:`drkernel.env.guards.audit.innermost_actor`,
from the Python stack: torch's own frames skipped): Triton's interpreter moving a kernel's arguments
is the kernel's; the candidate's code — forward, a launch-grid callable, a kernel body calling torch
— is torch work outside its kernels. Each such operator is costed in *byte equivalents*: bytes of
its tensor arguments and results, and for operators with a FLOP formula — torch's own
(``torch.utils.flop_counter``: products, convolutions, every attention kernel; fused variants such
as the CPU's attention or ``_addmm_activation`` priced by the formula of the arithmetic they do) —
one byte per FLOP when that is larger. (An H100 balances at about 20 fp32 FLOPs a byte, but the CPU runs the tasks' small
sizes, where a product's arithmetic intensity is a fraction of its intensity at full size: priced at
the balance point, the product of ``envs/fused_ops`` task 02 was 48% of its small reference's cost,
and a candidate doing it in torch kept half its coverage, while on a GPU at full size the product is
nearly all of the time. At one byte a FLOP it is 89%.) The grader divides by the same cost of the
whole reference forward (measured the same way in the reference's own process)::

    coverage (CPU) = 1 - min(1, cost of the candidate's torch work / cost of the reference's)

Allocation, views, fills and metadata are free. Operators the model cannot bound — no FLOP formula,
not tagged ``pointwise``/``reduction`` by torch, not in :data:`LINEAR_WORK` — fail closed for the
candidate (:data:`UNBOUNDED`: more than the whole reference) and cost their bytes for the reference.
A label or marker the candidate writes changes nothing here: attribution comes from where code
lives, not from names.
"""

from __future__ import annotations

import functools
import math
from types import MappingProxyType
from typing import Any, Callable, Mapping

#: aten operators that allocate, fill, reshape or describe tensors without computing anything.
NON_COMPUTE = frozenset({
    "empty", "empty_like", "empty_strided", "empty_permuted", "new_empty", "new_empty_strided", "zeros", "zeros_like",
    "ones", "ones_like", "full", "full_like", "new_zeros", "new_ones", "new_full", "zero_", "fill_", "scalar_tensor",
    "view", "reshape", "_reshape_alias", "as_strided", "expand", "expand_as", "t", "transpose", "permute", "squeeze",
    "unsqueeze", "flatten", "unflatten", "select", "slice", "narrow", "split", "split_with_sizes", "chunk", "unbind",
    "detach", "alias", "lift_fresh", "resolve_conj", "resolve_neg", "is_nonzero", "item", "_local_scalar_dense",
    "size", "stride", "numel", "dim", "view_as", "_unsafe_view", "unsafe_view", "result_type", "set_",
    "_has_compatible_shallow_copy_type", "is_same_size", "movedim", "numpy_T", "arange", "linspace",
    "lift_fresh_copy", "_to_copy_meta", "sym_size", "sym_stride", "sym_numel", "sym_storage_offset", "storage_offset",
    "is_contiguous", "_nested_tensor_size", "record_stream",
})
_MATMULS = frozenset({"mm", "addmm", "bmm", "baddbmm", "matmul", "addmv", "mv", "dot", "_scaled_mm", "addbmm"})
#: Fused operators that do a registered operator's arithmetic under another name (the CPU's own
#: attention kernel, a GEMM with its activation): priced by that operator's FLOP formula.
_FLOP_ALIASES = {"_addmm_activation": "addmm",
                 "_scaled_dot_product_flash_attention_for_cpu": "_scaled_dot_product_flash_attention",
                 "_scaled_dot_product_fused_attention_overrideable": "_scaled_dot_product_flash_attention"}
#: Operators whose work is linear in the bytes they touch (besides those torch tags ``pointwise`` or
#: ``reduction``): copies, concatenation, indexing and gathers, normalisations, softmax, scans,
#: sorting, pooling, padding, comparisons. Priced by their bytes.
LINEAR_WORK = frozenset({
    "add", "sub", "rsub", "mul", "div", "fmod", "remainder", "maximum", "minimum", "clamp_min", "clamp_max", "where",
    "eq", "ne", "lt", "le", "gt", "ge", "logical_and", "logical_or", "logical_not", "logical_xor", "bitwise_not",
    "isnan", "isinf", "isfinite", "sign", "addcmul", "addcdiv", "lerp", "masked_fill", "copy", "copy_", "_to_copy",
    "to", "clone", "contiguous", "_copy_from", "_copy_from_and_resize", "cat", "stack", "index_select", "gather",
    "scatter", "scatter_add", "scatter_reduce", "index", "_unsafe_index", "index_put", "index_put_", "_index_put_impl_",
    "index_add", "index_copy", "index_fill", "masked_select", "masked_scatter", "take", "put_", "embedding",
    "embedding_bag", "_embedding_bag", "_embedding_bag_forward_only", "one_hot", "slice_scatter", "select_scatter",
    "diagonal_scatter", "as_strided_scatter", "_softmax", "_log_softmax", "softmax", "log_softmax",
    "native_layer_norm", "layer_norm", "native_batch_norm", "_native_batch_norm_legit",
    "_native_batch_norm_legit_no_training", "native_group_norm", "_fused_rms_norm", "rms_norm", "cumsum", "cumprod",
    "cummax", "cummin", "logcumsumexp", "sort", "argsort", "topk", "kthvalue", "median", "nonzero", "_unique2",
    "unique_dim", "bincount", "histc", "searchsorted", "bucketize", "constant_pad_nd", "reflection_pad1d",
    "reflection_pad2d", "replication_pad1d", "replication_pad2d", "repeat", "repeat_interleave", "flip", "roll",
    "tril", "triu", "avg_pool1d", "avg_pool2d", "avg_pool3d", "max_pool1d", "max_pool2d", "max_pool2d_with_indices",
    "max_pool3d_with_indices", "adaptive_avg_pool1d", "adaptive_avg_pool2d", "_adaptive_avg_pool2d",
    "adaptive_max_pool2d", "upsample_nearest1d", "upsample_nearest2d", "upsample_bilinear2d", "upsample_linear1d",
    "grid_sampler_2d", "var", "std", "var_mean", "std_mean", "sum", "mean", "prod", "amax", "amin", "max", "min",
    "argmax", "argmin", "all", "any", "logsumexp", "norm", "linalg_vector_norm", "dropout", "native_dropout",
    "alias_copy", "view_copy", "expand_copy", "permute_copy", "t_copy", "transpose_copy", "unsqueeze_copy",
    "squeeze_copy", "slice_copy", "select_copy", "split_copy", "unbind_copy", "diagonal", "diag_embed", "diag",
})
UNBOUNDED = 1e18
"""The price of a candidate's operator whose work the grader cannot bound (no FLOP formula, not
linear in its bytes): a fused library kernel, linear algebra, a bilinear form. Fail closed: one
such call outside the candidate's kernels is more than the whole reference."""

_CONVS = frozenset({"convolution", "_convolution", "conv2d", "conv1d", "conv3d", "cudnn_convolution",
                    "mkldnn_convolution", "_slow_conv2d_forward", "slow_conv3d_forward", "conv_transpose2d"})
FLOPS_PER_BYTE = 1.0
"""FLOPs of a matrix product or convolution priced as one byte equivalent (see the module doc)."""


@functools.lru_cache(maxsize=1)
def _formulas() -> Mapping[str, Any]:
    """torch's own FLOP formulas (``torch.utils.flop_counter``: products, convolutions, every
    attention kernel, maintained with the operators), by aten operator name; read-only (the table
    lives in the candidate's process)."""
    try:
        from torch.utils.flop_counter import flop_registry
    except ImportError:  # pragma: no cover - torch < 2.1
        return MappingProxyType({})
    return MappingProxyType({str(getattr(packet, "__name__", packet)).split(".")[-1]: fn
                             for packet, fn in flop_registry.items()})


def _flop_formula(base: str) -> Any:
    """The FLOP formula of an aten operator (through :data:`_FLOP_ALIASES`), or None."""
    return _formulas().get(_FLOP_ALIASES.get(base, base))


def _tensors(x: Any, out: list) -> None:
    import torch

    if isinstance(x, torch.Tensor):
        out.append(x)
    elif isinstance(x, (list, tuple)):
        for y in x:
            _tensors(y, out)
    elif isinstance(x, dict):
        for y in x.values():
            _tensors(y, out)


def op_cost(name: str, args: Any, kwargs: Any, result: Any, func: Any = None, bounded_only: bool = False) -> float:
    """Byte equivalents of one aten operator (see the module doc); 0 for non-compute operators.

    An operator that has no FLOP formula and is neither tagged ``pointwise``/``reduction`` by torch
    nor in :data:`LINEAR_WORK` has work the bytes do not bound: with ``bounded_only`` (the
    candidate's calls) it costs :data:`UNBOUNDED`; otherwise (the reference's) its bytes."""
    base = name.split(".")[0]
    if base in NON_COMPUTE:
        return 0.0
    ts: list = []
    _tensors(args, ts)
    _tensors(kwargs, ts)
    _tensors(result, ts)
    nbytes = float(sum(t.numel() * t.element_size() for t in ts))
    flops = 0.0
    formula = _flop_formula(base)
    try:
        if formula is not None:
            flops = float(formula(*args, **kwargs, out_val=result))
        elif base == "_cdist_forward" and len(ts) >= 2:  # x1 [.., P, M], x2 [.., R, M]: 3 FLOPs a term
            x1, x2 = ts[0], ts[1]
            flops = 3.0 * x1.numel() * x2.shape[-2]
        elif base in _MATMULS:
            a = [t for t in ts[:3] if t.dim() >= 1]
            mats = [t for t in a if t.dim() >= 2]
            if len(mats) >= 2:
                x, y = mats[-2], mats[-1]
                batch = math.prod(x.shape[:-2]) if x.dim() > 2 else 1
                flops = 2.0 * batch * x.shape[-2] * x.shape[-1] * y.shape[-1]
        elif base in _CONVS and len(ts) >= 2:
            w, out = ts[1], ts[-1]
            flops = 2.0 * out.numel() * (w.numel() / max(w.shape[0], 1))
    except Exception:  # noqa: BLE001 - shapes of an unusual overload: bytes only
        flops = 0.0
    if bounded_only and formula is None and flops == 0.0 and base not in LINEAR_WORK and base not in _MATMULS \
            and base != "_cdist_forward" and not _linear_tags(func):
        return UNBOUNDED
    return max(nbytes, flops / FLOPS_PER_BYTE)


def _linear_tags(func: Any) -> bool:
    """Whether torch tags the operator (this overload) ``pointwise`` or ``reduction``."""
    import torch

    tags = getattr(func, "tags", None) or ()
    wanted = {getattr(torch.Tag, "pointwise", None), getattr(torch.Tag, "reduction", None)} - {None}
    return any(t in wanted for t in tags)


def make_foreign_work(classify: Callable[[Any], Any], bounded_only: bool = False) -> Any:
    """A torch dispatch mode that reports each aten operator to ``classify((name, cost_fn, frame))``
    (a sealed callable owned by the harness; ``cost_fn()`` computes the cost lazily, only for
    operators the candidate ran; ``bounded_only``: see :func:`op_cost`)."""
    import sys

    from torch.utils._python_dispatch import TorchDispatchMode

    getframe = sys._getframe

    class ForeignWork(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            result = func(*args, **kwargs)
            name = str(getattr(func, "__name__", func))
            if name.split(".")[0] not in NON_COMPUTE:
                classify((name, lambda: op_cost(name, args, kwargs, result, func, bounded_only), getframe(1)))
            return result

    return ForeignWork()


def warm_up() -> None:
    """Enter a dispatch mode once: torch imports a good part of itself lazily the first time one
    is used (~2 CPU-seconds), which belongs to the worker's warm start, not to a candidate's call."""
    import torch

    with make_foreign_work(lambda msg: None):
        (torch.ones(2) + 1).sum()


def device_records(result: Any, accessors: dict[str, Any], limit: int = 200_000) -> list[list[Any]]:
    """``[name, start_ns, duration_ns, stream]`` of every CUDA-device record of a stopped profiler's
    ``result`` (what ``torch._C._autograd._disable_profiler()`` returned), read only through
    ``accessors`` (:func:`kineto_accessors`: the result's and the events' C functions and types,
    captured before the candidate loaded; a patched pybind class or a look-alike object is not
    read: its type is checked)."""
    if type(result) is not accessors["result_type"]:
        raise RuntimeError(f"the profiler's result is a {type(result).__name__}, not the profiler's")
    event_type = accessors["event_type"]
    name, dev, start, dur, stream = (accessors[k] for k in ("name", "device_type", "start_ns", "duration_ns",
                                                            "device_resource_id"))
    out: list[list[Any]] = []
    for e in accessors["events"](result):
        if type(e) is not event_type:
            raise RuntimeError(f"a profiler event is a {type(e).__name__}")
        if "CUDA" not in str(dev(e)):
            continue
        out.append([str(name(e))[:200], int(start(e)), int(dur(e)), int(stream(e))])
        if len(out) >= limit:
            break
    return out


def kineto_accessors(torch: Any) -> dict[str, Any]:
    """The profiler's C functions, captured now (pybind11 classes can be patched later): the stop
    (``disable``), the result's and the events' types, the result's ``events`` and the event
    accessors."""
    ag = torch._C._autograd
    ke, pr = ag._KinetoEvent, ag._ProfilerResult
    out = {k: getattr(ke, k) for k in ("name", "device_type", "start_ns", "duration_ns", "device_resource_id")}
    out.update(disable=ag._disable_profiler, result_type=pr, events=pr.events, event_type=ke)
    return out


__all__ = ["NON_COMPUTE", "op_cost", "make_foreign_work", "warm_up", "device_records", "kineto_accessors",
           "FLOPS_PER_BYTE"]
