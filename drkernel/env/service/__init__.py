"""Grading across machines: an HTTP service (``drkernel serve``), its client ``RemoteGrader``, and a
Ray actor pool ``RayGrader`` — all behind the :class:`~drkernel.env.grader.Grader` protocol.

Public names are imported lazily: ``import drkernel.env.service`` pulls in neither FastAPI nor Ray.

    from drkernel.env.service import RemoteGrader, RayGrader
"""

from __future__ import annotations

import importlib
from typing import Any

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


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'drkernel.env.service' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
