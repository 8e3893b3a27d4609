"""Deprecated name of :mod:`drkernel.serve` (the grading HTTP service, ``RemoteGrader``, ``RayGrader``).

The service moved out of the grader package to ``drkernel.serve``; this shim re-exports its public
names for one release and warns on import. Import from ``drkernel.serve`` instead::

    from drkernel.serve import RemoteGrader, RayGrader     # was: drkernel.env.service

Submodules (``drkernel.env.service.remote`` ...) are not re-exported: they are
``drkernel.serve.remote`` etc. ``python -m drkernel.env.service`` still starts the server (it runs
``drkernel serve``).
"""

from __future__ import annotations

import warnings

import drkernel.serve as _serve

warnings.warn("drkernel.env.service is deprecated and will be removed in the next release: "
              "import from drkernel.serve", DeprecationWarning, stacklevel=2)

__all__ = list(_serve.__all__)


def __getattr__(name: str):
    if name in __all__:
        return getattr(_serve, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
