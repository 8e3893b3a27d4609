"""Triton's compilation cache for a candidate's process: private writes over a read-only shared layer.

A candidate compiles into its evaluation's own directory (``TRITON_CACHE_DIR``), which is deleted
with the process, so nothing it writes (a binary, a launcher, a file of its own) reaches another
evaluation. What the worker compiled before the candidate loaded (the launch-budget hold, the
measurement fences, their launchers) stays readable from the shared layer
(``DRKERNEL_TRITON_SHARED_CACHE``, the worker's cache before confinement), so it is not rebuilt.
Selected with ``TRITON_CACHE_MANAGER=drkernel.env.process.triton_cache:LayeredCacheManager``.
"""

from __future__ import annotations

import json
import os
from typing import Dict, Optional

from triton.runtime.cache import FileCacheManager

SHARED_ENV = "DRKERNEL_TRITON_SHARED_CACHE"


class LayeredCacheManager(FileCacheManager):
    def __init__(self, key, override=False, dump=False):
        super().__init__(key, override, dump)
        shared = os.environ.get(SHARED_ENV)
        self.shared_dir = os.path.join(shared, key) if shared and not (override or dump) else None

    def _shared(self, filename: str) -> Optional[str]:
        if not self.shared_dir:
            return None
        path = os.path.join(self.shared_dir, filename)
        return path if os.path.exists(path) else None

    def get_file(self, filename) -> Optional[str]:
        return super().get_file(filename) or self._shared(filename)

    def get_group(self, filename: str) -> Optional[Dict[str, str]]:
        group = super().get_group(filename)
        if group is not None:
            return group
        path = self._shared(f"__grp__{filename}")
        if path is None:
            return None
        try:
            with open(path) as fh:
                children = json.load(fh).get("child_paths")
        except (OSError, ValueError, AttributeError):
            return None
        if not isinstance(children, dict):
            return None
        return {c: p for c, p in children.items() if isinstance(p, str) and os.path.exists(p)}


__all__ = ["LayeredCacheManager", "SHARED_ENV"]
