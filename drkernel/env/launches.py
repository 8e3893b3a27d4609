"""The candidate's Triton kernels, as the harness sees them.

Installed in the candidate's process *before* the candidate is imported:

* **Naming** (GPU): every ``@triton.jit`` function defined in the candidate's file gets a suffix
  chosen by the grader appended to the name its compiled kernel carries (``relu_kernel`` ->
  ``relu_kernel__dk5f2a91``). The CUDA profiler reports kernels by that name, so the grader can tell
  the candidate's own kernels from torch's, cuBLAS's or anything else's in the device records:
  no library kernel has the suffix, and no label or marker the candidate writes changes a
  kernel's name. (A candidate can defeat the renaming only for its own kernels, which then count
  as not its own.)
* **Counting** (CPU interpreter): launches of the candidate's kernels per call, through the entry
  points every Triton launch goes through (``JITFunction.run``, ``InterpretedFunction.run``;
  ``@triton.autotune``/``@triton.heuristics`` end in one of these). On a GPU the device records
  decide instead.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any


@dataclass
class LaunchRecorder:
    own_file: str | None = None
    counts: Counter = field(default_factory=Counter)
    """Launches of the candidate's own kernels since the last :meth:`reset`, by kernel name."""
    installed: list = field(default_factory=list)

    def reset(self) -> None:
        self.counts = Counter()

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
            own = code is not None and recorder.own_file is not None and code.co_filename == recorder.own_file
            result = original(fn_self, *args, **kwargs)  # a launch that raises is not counted
            if own and not kwargs.get("warmup"):
                recorder.counts[getattr(fn, "__name__", "?")] += 1
            return result

        run._drkernel_hook = True  # type: ignore[attr-defined]
        return run


def install_naming(own_file: str, suffix: str) -> None:
    """Append ``suffix`` to the compiled name of every ``@triton.jit`` function defined in
    ``own_file`` from now on (:class:`triton.runtime.jit.JITFunction` construction)."""
    if not suffix.isidentifier() or "." in suffix:
        raise ValueError(f"kernel name suffix must be an identifier fragment, got {suffix!r}")
    from triton.runtime.jit import JITFunction

    original = JITFunction.__init__
    if getattr(original, "_drkernel_naming", False):
        return

    def __init__(self, fn, *args, **kwargs):
        original(self, fn, *args, **kwargs)
        code = getattr(fn, "__code__", None)
        if code is not None and code.co_filename == own_file:
            self._fn_name = f"{self._fn_name}{suffix}"

    __init__._drkernel_naming = True  # type: ignore[attr-defined]
    JITFunction.__init__ = __init__


__all__ = ["LaunchRecorder", "install_naming"]
