"""Results as standard JSON: how the service writes NaN and infinities.

An incorrect kernel often outputs NaN or Inf (early in RL training, all the time), and its result
then holds non-finite floats, e.g. ``details["first_failure"]["max_abs_err"] = inf``. Standard JSON
has no token for them (Python's ``NaN``/``Infinity`` are an extension most parsers refuse), so
every result the service stores or sends is encoded:

* each non-finite float, wherever it is (a top-level field such as ``speedup`` or deep inside
  ``details``), becomes the string ``"NaN"``, ``"Infinity"`` or ``"-Infinity"`` (the spellings
  ``float()`` in Python and ``Number()`` in JavaScript read back);
* the result gains ``"nonfinite"``: the JSON Pointers (RFC 6901) of exactly those values, e.g.
  ``["/details/first_failure/max_abs_err", "/speedup"]``, so a decoder turns back those strings and
  no others (a message that happens to read ``"NaN"`` stays a string).

A result with only finite floats is unchanged (no ``nonfinite`` key). :func:`decode_result` is the
inverse: ``EvalResult.from_dict(decode_result(encode_result(r.to_dict())))`` equals ``r``.
"""

from __future__ import annotations

import math
from typing import Any

NONFINITE_KEY = "nonfinite"
_NAMES = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}


def _name(x: float) -> str:
    if math.isnan(x):
        return "NaN"
    return "Infinity" if x > 0 else "-Infinity"


def _escape(token: str) -> str:
    return token.replace("~", "~0").replace("/", "~1")


def _unescape(token: str) -> str:
    return token.replace("~1", "/").replace("~0", "~")


def _encode(value: Any, path: str, found: list[str]) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        found.append(path)
        return _name(value)
    if isinstance(value, dict):
        return {k: _encode(v, f"{path}/{_escape(str(k))}", found) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_encode(v, f"{path}/{i}", found) for i, v in enumerate(value)]
    return value


def encode_result(result: dict[str, Any]) -> dict[str, Any]:
    """``result`` (an ``EvalResult.to_dict()``) with every non-finite float replaced and listed
    under ``"nonfinite"`` (see the module docstring). Idempotent; the input is not modified."""
    found: list[str] = []
    encoded = _encode(result, "", found)
    if not found:
        return encoded
    previous = [p for p in encoded.get(NONFINITE_KEY) or [] if p not in found]
    encoded[NONFINITE_KEY] = sorted(previous + found)
    return encoded


def decode_result(result: dict[str, Any]) -> dict[str, Any]:
    """The inverse of :func:`encode_result`: the listed strings become floats again, and the
    ``"nonfinite"`` key is dropped. A pointer that names no such string is an error (ValueError)."""
    pointers = result.get(NONFINITE_KEY)
    if not pointers:
        return {k: v for k, v in result.items() if k != NONFINITE_KEY}
    decoded = _copy(result)
    del decoded[NONFINITE_KEY]
    for pointer in pointers:
        tokens = [_unescape(t) for t in pointer.split("/")[1:]]
        if not tokens:
            raise ValueError(f"nonfinite pointer {pointer!r} names the whole result")
        parent: Any = decoded
        try:
            for token in tokens[:-1]:
                parent = parent[int(token)] if isinstance(parent, list) else parent[token]
            last: Any = int(tokens[-1]) if isinstance(parent, list) else tokens[-1]
            name = parent[last]
        except (KeyError, IndexError, ValueError, TypeError):
            raise ValueError(f"nonfinite pointer {pointer!r} names nothing in the result") from None
        if name not in _NAMES:
            raise ValueError(f"nonfinite pointer {pointer!r} names {name!r}, not NaN/Infinity/-Infinity")
        parent[last] = _NAMES[name]
    return decoded


def _copy(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _copy(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_copy(v) for v in value]
    return value


__all__ = ["encode_result", "decode_result", "NONFINITE_KEY"]
