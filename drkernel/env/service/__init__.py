"""Grading across machines: an HTTP service (``drkernel serve``), its client ``RemoteGrader``, and a
Ray actor pool ``RayGrader`` — all behind the :class:`~drkernel.env.grader.Grader` protocol.

Public names are imported lazily: ``import drkernel.env.service`` pulls in neither FastAPI nor Ray.

    from drkernel.env.service import RemoteGrader, RayGrader
"""

from __future__ import annotations

from drkernel._lazy import lazy_exports

_EXPORTS = {
    "RemoteGrader": "drkernel.env.service.remote",
    "RayGrader": "drkernel.env.service.ray_pool",
    "GradingService": "drkernel.env.service.app",
    "ServiceSettings": "drkernel.env.service.app",
    "create_app": "drkernel.env.service.app",
    "JobStore": "drkernel.env.service.jobs",
    "ResultCache": "drkernel.env.service.cache",
    "CachedGrader": "drkernel.env.service.cache",
    "cache_key": "drkernel.env.service.cache",
}

__all__ = sorted(_EXPORTS)


__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, globals())
