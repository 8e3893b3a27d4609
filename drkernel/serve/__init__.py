"""Grading across machines: an HTTP service (``drkernel serve``), its client ``RemoteGrader``, and a
Ray actor pool ``RayGrader`` — all behind the :class:`~drkernel.env.grader.Grader` protocol.

Public names are imported lazily: ``import drkernel.serve`` pulls in neither FastAPI nor Ray.

    from drkernel.serve import RemoteGrader, RayGrader

The server is started by the ``drkernel serve`` command (:mod:`drkernel.cli.serve`, also ``python -m
drkernel serve``).
"""

from __future__ import annotations

from drkernel._lazy import lazy_exports

TOKEN_ENV = "DRKERNEL_SERVE_TOKEN"
"""The environment variable holding the bearer token: read by ``drkernel serve`` (when ``--token`` is
not given) and by :class:`~drkernel.serve.remote.RemoteGrader` (when no token is passed)."""

_EXPORTS = {
    "RemoteGrader": "drkernel.serve.remote",
    "RayGrader": "drkernel.serve.ray_pool",
    "GradingService": "drkernel.serve.app",
    "ServiceSettings": "drkernel.serve.app",
    "create_app": "drkernel.serve.app",
    "JobStore": "drkernel.serve.jobs",
    "ResultCache": "drkernel.serve.cache",
    "CachedGrader": "drkernel.serve.cache",
    "cache_key": "drkernel.serve.cache",
}

__all__ = sorted([*_EXPORTS, "TOKEN_ENV"])


__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, globals())
