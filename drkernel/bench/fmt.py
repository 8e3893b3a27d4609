"""Number formatting shared by the bench's tables (:mod:`~drkernel.bench.report`) and its plot
(:mod:`~drkernel.bench.plot`): a missing or NaN value prints as ``-``."""

from __future__ import annotations

import math


def _missing(x: float | None) -> bool:
    return x is None or (isinstance(x, float) and math.isnan(x))


def pct(x: float | None) -> str:
    """A fraction as a percentage with one decimal (``0.125`` -> ``12.5%``)."""
    return "-" if _missing(x) else f"{100 * x:.1f}%"


def num(x: float | None, fmt: str = ".3g", suffix: str = "") -> str:
    """A number in format ``fmt``, followed by ``suffix``."""
    return "-" if _missing(x) else f"{x:{fmt}}{suffix}"


__all__ = ["pct", "num"]
