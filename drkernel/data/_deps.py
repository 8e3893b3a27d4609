"""Optional dependencies, imported when needed with an error that says what to install."""

from __future__ import annotations

import importlib
from types import ModuleType


class MissingDependency(ImportError):
    """An optional dependency is not installed; the message names the pip extra that provides it."""


def require(module: str, purpose: str, extra: str = "bench") -> ModuleType:
    """Import ``module`` or raise :class:`MissingDependency` naming ``pip install drkernel[extra]``."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        top = module.split(".")[0]
        raise MissingDependency(f"{purpose} needs {top} ({exc.__class__.__name__}: {exc}); "
                                f"install it with: pip install drkernel[{extra}]") from None
