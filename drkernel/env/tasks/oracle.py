"""The precision oracle: the reference evaluated in float64.

A kernel's error is measured against the true value, not against eager PyTorch, whose own result
carries the rounding of its dtypes (a bf16 reference rounds after every op; an fp32 one sums in
some order). The grader runs the reference once more with every floating value widened exactly to
float64::

    oracle = Model_fp64(x_fp64)       parameters, buffers and tensor attributes .to(float64),
                                      inputs .to(float64) (exact: every bf16/fp16/fp32 value is a
                                      float64 value), under Float64Mode

and :mod:`drkernel.env.judge.precision` compares the candidate's error ``|out - oracle|`` with the
reference's own ``|ref - oracle|``.

:class:`Float64Mode` keeps the forward in float64 where the reference asks for a lower precision
itself: a floating ``dtype`` argument (``x.to(torch.float16)``, ``softmax(x, dtype=torch.float32)``,
``torch.zeros(n, dtype=torch.bfloat16)``) becomes float64, ``Tensor.half/float/bfloat16`` become
``Tensor.double``, and a floating result in another dtype (a factory under the default dtype) is
widened. So the oracle computes the mathematical function the reference writes down; a reference
that rounds on purpose (a quantiser's ``round``) still rounds, in float64.

Where a forward cannot run in float64 on the device (an operator without a float64 CUDA kernel), it
runs on the CPU in float64; where it cannot run in float64 at all, there is no oracle
(:class:`OracleUnavailable`, with the reason) and the comparison falls back to the reference with
the scale-aware tolerance (:func:`drkernel.env.judge.compare.compare_outputs`), which the result says.
"""

from __future__ import annotations

import copy
from typing import Any

import torch
from torch.overrides import TorchFunctionMode

_NARROW = {torch.float16: torch.float64, torch.bfloat16: torch.float64, torch.float32: torch.float64,
           torch.complex32: torch.complex128, torch.complex64: torch.complex128}
for _name in ("float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz", "float8_e5m2fnuz", "float8_e8m0fnu"):
    if hasattr(torch, _name):
        _NARROW[getattr(torch, _name)] = torch.float64

_TO_DOUBLE = {torch.Tensor.half, torch.Tensor.float, torch.Tensor.bfloat16}


class OracleUnavailable(Exception):
    """The reference cannot be evaluated in float64 (the message says why)."""


def _wide(value: Any) -> Any:
    if isinstance(value, torch.dtype):
        return _NARROW.get(value, value)
    return value


def _widen(value: Any) -> Any:
    """Floating and complex tensors in a narrower dtype widened (recursively through tuples/lists)."""
    if isinstance(value, torch.Tensor):
        return value.to(_NARROW[value.dtype]) if value.dtype in _NARROW else value
    if isinstance(value, tuple) and not hasattr(value, "_fields"):
        return tuple(_widen(v) for v in value)
    if isinstance(value, list):
        return [_widen(v) for v in value]
    return value


class Float64Mode(TorchFunctionMode):
    """Every floating dtype a torch function is asked for, or returns, is float64 (complex:
    complex128). Thread-local, like every torch function mode: other evaluations' threads are not
    affected."""

    def __torch_function__(self, func, types, args=(), kwargs=None):  # noqa: ANN001 - torch's protocol
        if func in _TO_DOUBLE:
            func = torch.Tensor.double
        args = tuple(_wide(a) for a in args)
        kwargs = {k: _wide(v) for k, v in (kwargs or {}).items()}
        return _widen(func(*args, **kwargs))


def widen_model(model: torch.nn.Module) -> torch.nn.Module:
    """A float64 copy of ``model``: parameters and buffers (``Module.to``) and plain tensor
    attributes of every submodule (``self.scale = torch.tensor(...)``, which ``.to`` leaves)."""
    m = copy.deepcopy(model).to(torch.float64)
    for sub in m.modules():
        for name, value in list(vars(sub).items()):
            if isinstance(value, torch.Tensor) and value.dtype in _NARROW:
                setattr(sub, name, value.to(_NARROW[value.dtype]))
    return m


def widen_inputs(inputs: list[Any]) -> list[Any]:
    """Floating tensor inputs as float64 (exact), on their device; other values as they are."""
    return [_widen(x) if isinstance(x, torch.Tensor) else x for x in inputs]


def evaluate_float64(model: torch.nn.Module, inputs: list[Any]) -> tuple[torch.Tensor, str]:
    """``(output, where)``: ``model`` (a float64 copy, :func:`widen_model`) on float64 ``inputs``
    under :class:`Float64Mode`, on the inputs' device, or on the CPU when that fails there
    (``where`` says which). The output is float64 (complex128) on the inputs' device. Raises
    OracleUnavailable when neither runs or the result is not one floating tensor."""
    device = next((x.device for x in inputs if isinstance(x, torch.Tensor)), torch.device("cpu"))
    first = None
    for where in ([device] if device.type == "cpu" else [device, torch.device("cpu")]):
        try:
            m = model if where == device else model.to(where)
            xs = inputs if where == device else [x.to(where) if isinstance(x, torch.Tensor) else x for x in inputs]
            with torch.no_grad(), Float64Mode():
                out = m(*xs)
        except Exception as exc:  # noqa: BLE001 - an operator without a float64 kernel here, say
            first = first or f"{type(exc).__name__}: {str(exc).strip().splitlines()[0][:200] if str(exc).strip() else ''}"
            continue
        if not isinstance(out, torch.Tensor):
            raise OracleUnavailable(f"the float64 forward returned {type(out).__name__}, not a tensor")
        out = _widen(out.detach())
        return out.to(device), f"float64 on {where.type}"
    raise OracleUnavailable(f"the reference does not run in float64: {first}")


__all__ = ["Float64Mode", "OracleUnavailable", "evaluate_float64", "widen_inputs", "widen_model"]
