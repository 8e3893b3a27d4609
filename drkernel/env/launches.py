"""Record which of the candidate's Triton kernels launch, and how long the launches take.

Installed in the candidate's process *before* the candidate is imported. It wraps the entry points
every Triton launch goes through (``JITFunction.run`` when compiling for a GPU,
``InterpretedFunction.run`` under ``TRITON_INTERPRET=1``; ``@triton.autotune`` and
``@triton.heuristics`` wrappers end in one of these). Only kernels whose source lives in the
candidate's file count as the candidate's own.
"""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

_perf = time.perf_counter


@dataclass
class LaunchRecorder:
    own_file: str | None = None
    counts: Counter = field(default_factory=Counter)
    """Launches of the candidate's own kernels since the last :meth:`reset`, by kernel name."""
    other: Counter = field(default_factory=Counter)
    """Launches of Triton kernels defined elsewhere (libraries)."""
    seconds: float = 0.0
    """Wall time spent inside own launches (on the CPU interpreter: the kernel's execution)."""
    installed: list = field(default_factory=list)
    marker: Any = None
    """While set (CPU profiling): a ``record_function`` factory wrapped around each own launch, so
    the profiler can tell work inside the candidate's kernels from torch work around them."""

    def reset(self) -> None:
        self.counts = Counter()
        self.other = Counter()
        self.seconds = 0.0

    def total(self) -> int:
        return sum(self.counts.values())

    def install(self) -> None:
        targets = []
        try:
            from triton.runtime.jit import JITFunction

            targets.append(JITFunction)
        except ImportError:  # pragma: no cover - triton always has it
            pass
        try:
            from triton.runtime.interpreter import InterpretedFunction

            targets.append(InterpretedFunction)
        except ImportError:  # pragma: no cover
            pass
        for cls in targets:
            original = cls.run
            if getattr(original, "_drkernel_hook", False):
                continue
            cls.run = self._wrap(original)
            self.installed.append((cls, "run", cls.run))

    def hooks_intact(self) -> bool:
        return all(getattr(cls, name) is fn for cls, name, fn in self.installed)

    def _wrap(self, original):
        recorder = self

        def run(fn_self, *args, **kwargs):
            fn = getattr(fn_self, "fn", None)
            code = getattr(fn, "__code__", None)
            name = getattr(fn, "__name__", "?")
            own = code is not None and recorder.own_file is not None and code.co_filename == recorder.own_file
            if not own:
                recorder.other[name] += 1
                return original(fn_self, *args, **kwargs)
            # Under autotune/heuristics, warmup or benchmarking calls also pass through here.
            t0 = _perf()
            if recorder.marker is not None:
                with recorder.marker("drkernel::own_launch"):
                    result = original(fn_self, *args, **kwargs)
            else:
                result = original(fn_self, *args, **kwargs)  # a launch that raises is not counted
            recorder.seconds += _perf() - t0
            recorder.counts[name] += 1
            return result

        run._drkernel_hook = True  # type: ignore[attr-defined]
        return run
