"""Optional dependencies of the integrations, imported when needed with an error naming the extra."""

from __future__ import annotations

import importlib
from types import ModuleType

from drkernel.data._deps import MissingDependency


def require(module: str, purpose: str, extra: str) -> ModuleType:
    """Import ``module`` or raise :class:`~drkernel.data._deps.MissingDependency` (an ImportError)
    naming the extra: ``pip install -e '.[extra]'`` in a checkout, ``pip install 'drkernel[extra]'``."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        top = module.split(".")[0]
        raise MissingDependency(f"{purpose} needs {top} ({type(exc).__name__}: {exc}); install the "
                                f"'{extra}' extra: pip install -e '.[{extra}]' (or pip install "
                                f"'drkernel[{extra}]')") from None


__all__ = ["MissingDependency", "require"]
