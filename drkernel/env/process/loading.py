"""Loading the candidate's module from its file, and the lap timer of the processes that do.

Shared by the worker (:mod:`drkernel.env.process.worker`) and the compiler (:mod:`drkernel.env.process.precompile`),
so neither imports the other for them. Both bind what they call when this module is imported,
before any candidate code runs. Standard library only.
"""

from __future__ import annotations

import importlib.util
import os
import sys
import time
from typing import Any

_perf = time.perf_counter


def import_file(path: str) -> Any:
    """Import a module from ``path`` under a random name (the candidate's file: this function is
    the trusted code that reads and executes it)."""
    name = f"_candidate_{os.urandom(8).hex()}"
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def laps(into: dict[str, float]) -> Any:
    """``lap(name)``: the seconds since the previous lap (or this call) go to ``into[name]``."""
    last = [_perf()]

    def lap(name: str) -> None:
        now = _perf()
        into[name] = round(into.get(name, 0.0) + now - last[0], 6)
        last[0] = now

    return lap
