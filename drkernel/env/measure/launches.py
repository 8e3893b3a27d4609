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
* **Fencing memory** (CPU interpreter): a kernel's loads, stores and atomics may touch only the
  storages of the tensors passed to its launch (:func:`install_memory_fence`). On a GPU a kernel
  reaches device memory only; in the interpreter its pointers are host addresses, and without the
  fence an integer cast to a pointer reads or writes anything in the process (a NumPy buffer doing
  the math outside the kernels, the harness's own memory).
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
        self.counts.clear()  # the same object: the recorder's namespace stays as sealed (drkernel.env.guards.seal)

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
            cls.run = self._wrap(original, interpreted=cls.__name__ == "InterpretedFunction")
            self.installed.append((cls, "run", cls.run))

    def hooks_intact(self) -> bool:
        return all(getattr(cls, name) is fn for cls, name, fn in self.installed)

    def _wrap(self, original, interpreted: bool = False):
        recorder = self
        interpreter = None
        if interpreted:  # the interpreter's builder records each launch's grid
            try:
                from triton.runtime.interpreter import interpreter_builder as interpreter
            except ImportError:  # pragma: no cover
                interpreter = None
            if interpreter is not None and not hasattr(interpreter, "set_grid_dim"):
                interpreter = None

        def run(fn_self, *args, **kwargs):
            fn = getattr(fn_self, "fn", None)
            code = getattr(fn, "__code__", None)
            own = code is not None and recorder.own_file is not None and code.co_filename == recorder.own_file
            if own and interpreter is not None:
                interpreter.grid_dim = (0, 0, 0)  # set again by the interpreter when it runs programs
            result = original(fn_self, *args, **kwargs)  # a launch that raises is not counted
            # a launch of no program (an empty grid) does nothing: not counted (CPU interpreter;
            # on a GPU it leaves no device record)
            ran = interpreter is None or all(d > 0 for d in getattr(interpreter, "grid_dim", (1,)))
            if own and ran and not kwargs.get("warmup"):
                recorder.counts[getattr(fn, "__name__", "?")] += 1
            return result

        run._drkernel_hook = True  # type: ignore[attr-defined]
        return run


def install_naming(own_file: str, suffix: str) -> None:
    """Append ``suffix`` to the compiled name of every ``@triton.jit`` function defined in
    ``own_file`` from now on (:class:`triton.runtime.jit.JITFunction` construction)."""
    if not suffix.isidentifier() or "." in suffix:
        raise ValueError(f"kernel name suffix must be an identifier fragment, got {suffix!r}")
    import hashlib

    from triton.runtime.jit import JITFunction

    original = JITFunction.__init__
    if getattr(original, "_drkernel_naming", False):
        return
    named: dict[type, type] = {}

    def named_class(cls: type) -> type:
        """``cls`` with the suffix mixed into its cache key. Triton's cache key hashes a kernel's
        source, not its name: without the suffix in the key, a binary of the same source compiled
        under the plain name (the caller ran the solution itself, say) is found in the shared
        cache layer and launched under that name, so none of the candidate's kernels carries the
        suffix and an honest candidate fails (seen on an H100 after a diagnostic had imported three
        single_ops solutions). One subclass per class (``JITFunction``, Gluon's, ...)."""
        if cls not in named:
            base = cls.cache_key.fget

            def cache_key(self: Any) -> str:
                return hashlib.sha256(f"{base(self)}-named{suffix}".encode("utf-8")).hexdigest()

            named[cls] = type(f"Named{cls.__name__}", (cls,), {"cache_key": property(cache_key),
                                                                 "__module__": __name__})
            named[named[cls]] = named[cls]
        return named[cls]

    def __init__(self, fn, *args, **kwargs):
        original(self, fn, *args, **kwargs)
        code = getattr(fn, "__code__", None)
        if code is not None and code.co_filename == own_file:
            self._fn_name = f"{self._fn_name}{suffix}"
            self.__class__ = named_class(type(self))

    __init__._drkernel_naming = True  # type: ignore[attr-defined]
    JITFunction.__init__ = __init__


def install_memory_fence() -> None:
    """Confine the interpreter's memory operations to the launch's tensor arguments.

    Every launch goes through ``GridExecutor.__call__``; while it runs, the address ranges of the
    storages of its tensor arguments (in tuples and tensor descriptors too) are the only memory the
    interpreter's ``load``, ``store``, ``atomic_cas`` and ``atomic_rmw`` may reach: each lane that
    is not masked off must address a whole element inside one of them. Anything else fails the
    kernel (``PermissionError`` naming the address), as an illegal address does on a GPU: an
    out-of-bounds access is a bug (the correctness verdict says where), and memory the launch was
    not given — a NumPy buffer through an integer cast to a pointer, the harness's own — is out of
    reach. Outside a launch nothing may be reached. The ranges live in a
    :func:`~drkernel.env.guards.audit.sealed` handler, so code that reaches the wrappers can call them but
    not widen the fence (a launch it makes itself opens only its own arguments' storages).

    A launch's arguments must be what a compiled kernel accepts — tensors, numbers, strings,
    dtypes, ``@triton.jit`` functions, tuples and constexprs of them: any other object (a NumPy
    function, an object with operators) would run as host Python inside the interpreted body, where
    a GPU could not compile it. Anything else fails the launch the same way."""
    import numpy as np
    import torch
    import triton.language as tl
    import triton.runtime.interpreter as interp
    from triton.runtime.jit import KernelInterface

    from drkernel.env.guards.audit import sealed

    real = interp._interpreter
    descriptor = getattr(interp, "TensorDescriptor", None)

    def ranges_of(values: Any, out: list) -> None:
        for v in values:
            if isinstance(v, torch.Tensor):
                s = v.untyped_storage()
                out.append((int(s.data_ptr()), int(s.data_ptr()) + int(s.nbytes())))
            elif isinstance(v, (tuple, list)):
                ranges_of(v, out)
            elif descriptor is not None and isinstance(v, descriptor):
                ranges_of([v.base], out)

    stack: list = []

    def handler(msg: Any) -> None:
        op = msg[0]
        if op == "enter":
            ranges: list = []
            ranges_of(list(msg[1]) + list(msg[2].values()), ranges)
            stack.append(ranges)
        elif op == "exit":
            if stack:
                stack.pop()
        elif op == "check":
            ptrs, mask, itemsize, what = msg[1], msg[2], int(msg[3]), msg[4]
            addrs = np.asarray(ptrs).astype(np.uint64, copy=False).reshape(-1)
            if mask is not None:
                addrs = addrs[np.broadcast_to(np.asarray(mask, dtype=bool), np.shape(ptrs)).reshape(-1)]
            if addrs.size == 0:
                return
            ok = np.zeros(addrs.shape, dtype=bool)
            for lo, hi in (stack[-1] if stack else ()):
                ok |= (addrs >= np.uint64(lo)) & (addrs <= np.uint64(max(hi - itemsize, 0)))
            if not ok.all():
                bad = int(addrs[~ok][0])
                raise PermissionError(f"out-of-bounds {what}: {int((~ok).sum())} lane(s) address memory outside "
                                      f"the tensors passed to this launch (first at {bad:#x}); mask them, as "
                                      "on a GPU this is an illegal memory access")

    fence = sealed(handler)

    class Fenced:
        """``triton._C.libtriton.interpreter`` with its memory operations fenced."""

        def __getattr__(self, name: str) -> Any:
            return getattr(real, name)

    fenced = Fenced()
    fenced.load = lambda ptrs, mask, other, dtype: (  # type: ignore[attr-defined]
        fence(("check", ptrs, mask, np.dtype(dtype).itemsize, "load")), real.load(ptrs, mask, other, dtype))[1]
    fenced.store = lambda ptrs, value, mask: (  # type: ignore[attr-defined]
        fence(("check", ptrs, mask, np.asarray(value).dtype.itemsize, "store")), real.store(ptrs, value, mask))[1]
    fenced.atomic_cas = lambda ptr, cmp, val, sem: (  # type: ignore[attr-defined]
        fence(("check", ptr, None, np.asarray(val).dtype.itemsize, "atomic")), real.atomic_cas(ptr, cmp, val, sem))[1]
    fenced.atomic_rmw = lambda op, ptr, val, mask, sem: (  # type: ignore[attr-defined]
        fence(("check", ptr, mask, np.asarray(val).dtype.itemsize, "atomic")),
        real.atomic_rmw(op, ptr, val, mask, sem))[1]
    interp._interpreter = fenced

    original_call = interp.GridExecutor.__call__
    plain = (torch.Tensor, int, float, bool, str, type(None), torch.dtype, tl.dtype, KernelInterface, np.generic)
    if descriptor is not None:
        plain = plain + (descriptor,)

    def check_arg(v: Any) -> None:
        """What a compiled kernel accepts: tensors, numbers, strings, dtypes, @triton.jit functions
        (and tuples and constexprs of them). Any other object's methods and operators would run as
        host Python inside the interpreted body (``OBJ @ acc``, ``tl.static_print(OBJ)``)."""
        if isinstance(v, tl.constexpr):
            return check_arg(v.value)
        if isinstance(v, tuple):
            for x in v:
                check_arg(x)
            return
        if not isinstance(v, plain):
            what = getattr(v, "__name__", None) or type(v).__name__
            raise PermissionError(f"kernel argument {what} is a Python object: only tensors, numbers, strings, "
                                  "dtypes and @triton.jit functions can be passed to a kernel")

    def call(self: Any, *args: Any, **kwargs: Any) -> Any:
        for v in list(args) + list(kwargs.values()):
            check_arg(v)
        fence(("enter", args, kwargs))
        try:
            return original_call(self, *args, **kwargs)
        finally:
            fence(("exit",))

    interp.GridExecutor.__call__ = call


__all__ = ["LaunchRecorder", "install_naming", "install_memory_fence"]
