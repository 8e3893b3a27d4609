"""What the candidate's code may reach and do inside its process, and what it changed.

Runs in the candidate's worker (never in the grader). Installed after the harness is up and before
the candidate's module is imported:

* **A Python audit hook** (PEP 578; once added it cannot be removed from Python). Every audited
  operation is *blamed*: the frames are walked from the innermost outwards, standard-library
  frames are transparent, and the first other frame decides — the candidate's file (or any code
  outside the installed libraries and drkernel, such as ``exec``'d strings) means the candidate did
  it; torch, triton, numpy or drkernel means a library did it on its own behalf (Triton reading the
  kernel's source, compiling, starting ``ptxas``). Operations the candidate did are refused
  (``PermissionError``) unless they are on a short allow list (importing the allowed modules,
  ``time.sleep``, ``id``...), and recorded: frame and code-object access (``sys._getframe``,
  ``tb_frame``, ``gi_frame``, ``__code__``), ``gc``, files, sockets, processes, ``ctypes``,
  ``exec``/``compile``, trace and profile hooks, new audit hooks, threads (``_thread`` is audited
  from Python 3.12; before that its entry points are wrapped), imports of anything else.
  With frames and ``gc`` closed, the harness's own state (its locals, the plan of the calls, the
  reference's absence) is out of reach.
* **A ledger** that only the hook and the guards write and that nothing can erase: records live in
  a generator's frame (reading a generator's frame is itself an audited operation), so even code
  that reaches a guard's closure can add records but not remove them.
* **Conversion guards**: ``Tensor.numpy``, ``tolist``, ``__array__``, ``__dlpack__`` called by the
  candidate are recorded as ``host_compute`` (work done on host copies is work outside its kernels).
* **A global-state fingerprint** (:class:`StateGuard`), taken before the candidate loads and
  compared after it loads and after every call: library functions and classes rebound or shadowed,
  module forward hooks, dispatcher registrations, torch function/dispatch modes, backend flags
  (TF32, precision, default dtype, determinism), trace/profile hooks, GC callbacks, import hooks,
  threads, the current stream. Any difference is reported by name.

What this cannot promise (docs/architecture.md, "What the sandbox confines"): a Python process cannot
fully protect itself from code it runs. Paths around these checks need operations that are refused
or recorded here, and the numbers that decide rewards on a GPU (device time, which kernels ran) come
from the CUDA profiler's records, analysed in the grader.
"""

from __future__ import annotations

import collections
import os
import sys
import sysconfig
from types import ModuleType
from typing import Any, Callable

#: Modules the candidate may import (the root of the dotted name).
ALLOWED_IMPORTS = frozenset({
    "torch", "triton", "numpy", "math", "cmath", "typing", "typing_extensions", "dataclasses", "functools",
    "itertools", "operator", "collections", "enum", "abc", "__future__", "warnings", "numbers", "contextlib",
    "copy", "string", "re", "statistics", "fractions", "decimal", "random",
})

#: Audited events the candidate may cause (everything else it causes is refused and recorded).
ALLOWED_EVENTS = frozenset({"time.sleep", "array.__new__", "builtins.id", "sys._getframemodulename"})

#: Standard-library modules trusted to do audited things for their caller (namedtuple and dataclass
#: creation ``exec`` generated code; typing and enum read the caller's module name).
TRUSTED_STDLIB = ("dataclasses.py", "typing.py", "enum.py", os.path.join("collections", "__init__.py"),
                  "functools.py", "abc.py", "_collections_abc.py", "warnings.py", "contextlib.py", "copy.py",
                  "string.py", "re", "sre_compile.py", "sre_parse.py", "numbers.py", "random.py", "decimal.py",
                  "_pydecimal.py", "fractions.py", "statistics.py", "linecache.py", "tokenize.py")


def _paths() -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(standard-library prefixes, trusted library prefixes)."""
    std = {os.path.realpath(p) for p in (sysconfig.get_path("stdlib"), sysconfig.get_path("platstdlib")) if p}
    trusted = {os.path.realpath(p) for p in (sysconfig.get_path("purelib"), sysconfig.get_path("platlib")) if p}
    for entry in sys.path:
        if entry and ("site-packages" in entry or "dist-packages" in entry):
            trusted.add(os.path.realpath(entry))
    for mod in ("torch", "triton", "numpy", "drkernel"):
        m = sys.modules.get(mod)
        f = getattr(m, "__file__", None)
        if f:
            trusted.add(os.path.dirname(os.path.realpath(f)))
    std -= trusted  # a venv's site-packages lives under the stdlib tree on some layouts
    return tuple(sorted(std)), tuple(sorted(trusted))


def sealed_ledger() -> Callable[[tuple], Any]:
    """An append-only record book: ``send(("add", record))``, ``send(("read",))`` -> list copy.

    The list lives in a suspended generator's frame; reaching it needs ``gi_frame`` (audited and
    refused for the candidate). A malformed message is ignored, never fatal."""

    def book():
        records: list = []
        msg = yield None
        while True:
            reply = None
            try:
                if msg[0] == "add":
                    if len(records) < 10_000:
                        records.append(msg[1])
                elif msg[0] == "read":
                    reply = list(records)
            except Exception:  # noqa: BLE001 - a hostile message must not end the ledger
                reply = None
            msg = yield reply

    gen = book()
    next(gen)
    return gen.send


def sealed(handler: Callable[[Any], Any]) -> Callable[[Any], Any]:
    """``handler`` behind a generator: the returned callable passes its one argument to
    ``handler`` and returns (or raises) what it does, while ``handler`` and everything it closes
    over stay out of reach (they are locals of a suspended generator; ``gi_frame`` is audited).
    Use it for anything installed where the candidate can find it (class attributes, module
    attributes): code that reaches the returned callable can call it, nothing more."""

    def runner():
        msg = yield None
        while True:
            try:
                reply = (True, handler(msg))
            except BaseException as exc:  # noqa: BLE001 - handed back to the caller, never kills the runner
                reply = (False, exc)
            msg = yield reply

    gen = runner()
    next(gen)
    send = gen.send

    def call(msg: Any) -> Any:
        ok, value = send(msg)
        if ok:
            return value
        raise value

    return call


class Auditor:
    """The worker's audit: installs the hook and guards, keeps the ledger, answers the harness.

    Never store an Auditor where the candidate can reach it (module or class attributes, objects
    on the dispatch-mode stack): it holds the ``enforcing`` switch. Guards installed in reachable
    places hold only :func:`sealed` callables. Frames of the candidate's file, and of any file
    outside the standard library and the trusted libraries, are the candidate's."""

    def __init__(self) -> None:
        self._send = sealed_ledger()
        self._std, self._trusted = _paths()
        self._trusted_std = tuple(s for s in TRUSTED_STDLIB)
        self.enforcing = False
        """Off until the candidate's import starts (the harness's own start-up is not audited)."""
        self.workdir: str | None = None
        """The candidate's private directory: file operations inside it are allowed."""
        self.installed = False
        self.guard_functions: list[Any] = []
        """Every guard installed (drkernel.env.guards.seal watches their closures' cells)."""
        auditor = self

        def check(msg: Any) -> bool:
            """``(hack_id, what, frame)`` -> True (and a record) when the candidate is to blame."""
            hack_id, what, frame = msg
            if not auditor.enforcing:
                return False
            culprit = auditor.blame(frame)
            if culprit is None:
                return False
            auditor.note(str(hack_id), f"{what} at {_where(culprit)}")
            return True

        self.gate = sealed(check)
        """Sealed ``gate((hack_id, what, frame)) -> bool`` for guards in reachable places."""

    # -- blame ----------------------------------------------------------------------------------------
    def blame(self, frame: Any) -> Any:
        """The candidate's frame responsible for an operation at ``frame`` (None: a library's own).

        Standard-library frames are skipped, except the few that act for their caller by design
        (TRUSTED_STDLIB); the first frame of torch, triton, numpy or drkernel means a library acted.
        Task code (compiled by the harness as ``<task ...>``) and the import machinery are trusted:
        importing an allowed module reads its files (what the candidate then does with a module is
        blamed on the candidate; which files can be read at all is Landlock's business)."""
        std, trusted, tstd = self._std, self._trusted, self._trusted_std
        while frame is not None:
            fn = frame.f_code.co_filename
            if fn.startswith(trusted) or fn.startswith(("<task ", "<frozen importlib")):
                return None  # (the import machinery loading a module: what the module does is blamed later)
            if fn.startswith("<frozen"):
                frame = frame.f_back
                continue
            if fn.startswith(std):
                if fn.endswith(tstd):
                    return None
                frame = frame.f_back
                continue
            return frame
        return None

    def note(self, hack_id: str, detail: str) -> None:
        self._send(("add", (hack_id, detail[:300])))

    def records(self) -> list[tuple[str, str]]:
        """Everything recorded so far; a dead or forged ledger is itself a finding."""
        try:
            recs = self._send(("read",))
        except BaseException as exc:  # noqa: BLE001
            return [("harness_tampered", f"the audit ledger stopped working ({type(exc).__name__})")]
        if not isinstance(recs, list):
            return [("harness_tampered", "the audit ledger answered with something else")]
        return [r for r in recs if isinstance(r, tuple) and len(r) == 2]

    # -- installation -----------------------------------------------------------------------------------
    def install(self, torch: Any) -> None:
        """Add the audit hook and the guards (once per process; the hook cannot be removed)."""
        if self.installed:
            return
        self.installed = True
        getframe = sys._getframe
        auditor = self
        state = {"busy": False}
        allowed_imports, allowed_events = ALLOWED_IMPORTS, ALLOWED_EVENTS

        def hook(event: str, args: tuple) -> None:
            if event == "sys.addaudithook":
                if auditor.enforcing:
                    auditor.note("forbidden_operation", "sys.addaudithook: a second audit hook")
                    # a RuntimeError here makes CPython drop the new hook (silently, by design)
                    raise RuntimeError("adding audit hooks is not allowed")
                return
            if not auditor.enforcing or state["busy"]:
                return
            state["busy"] = True  # blame() reads frames, which raises audit events itself
            try:
                culprit = auditor.blame(getframe(1))
            except ValueError:  # raised from C with no Python frame (interpreter start-up or shutdown)
                culprit = None
            finally:
                state["busy"] = False
            if culprit is None or event in allowed_events:
                return
            if event in _PATH_EVENTS and auditor.workdir and _inside(args, auditor.workdir):
                return  # its own private directory (Landlock confines the rest)
            if event == "import":
                name = args[0] if args and isinstance(args[0], str) else ""
                if not name or name.split(".")[0] in allowed_imports:
                    return
            detail = _describe(event, args)
            auditor.note("forbidden_operation", f"{detail} at {_where(culprit)}")
            raise PermissionError(f"{detail} is not allowed in a kernel")

        sys.addaudithook(hook)
        self._pending: dict[int, tuple[Any, Any]] | None = {}  # one walk of sys.modules for all guards
        try:
            self._guard_threads()
            self._guard_conversions(torch)
            self._guard_modes(torch)
            self._guard_registrations(torch)
            self._guard_signals()
            self._guard_cuda_runtime(torch)
        finally:
            pending, self._pending = self._pending, None
            self._replace_everywhere(pending or {})

    def _wrap_everywhere(self, originals: list[Any], make: Callable[[Any], Any]) -> None:
        """Replace every module-level reference to each of ``originals`` by ``make(original)`` (during
        :meth:`install`, in the one walk of ``sys.modules`` at its end: a walk took 20-40 ms)."""
        wrappers = {id(o): (o, make(o)) for o in originals}
        pending = getattr(self, "_pending", None)
        if pending is not None:
            for key, pair in wrappers.items():
                pending.setdefault(key, pair)  # the first guard of an object wins, as with one walk each
            return
        self._replace_everywhere(wrappers)

    @staticmethod
    def _replace_everywhere(wrappers: dict[int, tuple[Any, Any]]) -> None:
        if not wrappers:
            return
        for mod in list(sys.modules.values()):
            d = getattr(mod, "__dict__", None)
            if not isinstance(d, dict):
                continue
            for key, value in list(d.items()):
                pair = wrappers.get(id(value))
                if pair is not None and value is pair[0]:
                    d[key] = pair[1]

    def _guarded(self, original: Any, hack_id: str, what: str, refuse: bool = True) -> Any:
        """A stand-in for ``original`` that records the calls the candidate makes and refuses them
        (``refuse=False``: lets them run). It holds only sealed callables: ``original`` itself is
        unreachable through it."""
        gate = self.gate
        getframe = sys._getframe
        invoke = sealed(lambda msg: original(*msg[0], **msg[1]))

        def guarded(*args, **kwargs):
            if gate((hack_id, what, getframe(1))) and refuse:
                raise PermissionError(f"{what} is not allowed in a kernel")
            return invoke((args, kwargs))

        guarded.__name__ = getattr(original, "__name__", "guarded")
        self.guard_functions.append(guarded)
        return guarded

    def _record_method(self, cls: type, name: str, hack_id: str) -> None:
        """Replace method ``cls.name`` by one that records the candidate's calls as ``hack_id``."""
        original = getattr(cls, name, None)
        if original is None:
            return
        gate = self.gate
        getframe = sys._getframe
        what = f"{cls.__name__}.{name}()"

        def recorded(self, *args, **kwargs):
            gate((hack_id, what, getframe(1)))
            return original(self, *args, **kwargs)

        recorded.__name__ = name
        self.guard_functions.append(recorded)
        setattr(cls, name, recorded)

    def _guard_threads(self) -> None:
        """Before Python 3.12 starting a thread raises no audit event: every reference to the
        low-level thread starters is replaced by a guard."""
        import _thread

        originals = [getattr(_thread, n) for n in ("start_new_thread", "start_new", "start_joinable_thread")
                     if hasattr(_thread, n)]
        self._wrap_everywhere(originals, lambda o: self._guarded(o, "forbidden_operation", "starting a thread"))

    def _guard_signals(self) -> None:
        """Signal handlers and timers set by the candidate. A Python signal handler is called with
        the *interrupted frame*: whatever the harness was running (the timing loop, with its samples
        and its seeds), a frame obtained without any audited operation, from which ``f_back`` and
        ``f_locals`` reach everything. And a timer defers work past the end of a timed call. Both
        are refused, however the ``signal`` module is reached (every reference is replaced)."""
        import signal

        try:
            import _signal
        except ImportError:  # pragma: no cover - CPython always has it
            _signal = None
        names = ("signal", "setitimer", "alarm", "raise_signal", "pthread_kill", "set_wakeup_fd",
                 "siginterrupt", "pthread_sigmask", "sigwait", "sigwaitinfo", "sigtimedwait")
        targets = []
        for owner in (signal, _signal):
            for n in names:
                fn = getattr(owner, n, None) if owner is not None else None
                if fn is not None and fn not in targets:
                    targets.append(fn)
        self._wrap_everywhere(targets, lambda o: self._guarded(o, "forbidden_operation",
                                                               f"signal.{getattr(o, '__name__', '?')}"))

    def _guard_modes(self, torch: Any) -> None:
        """Popping or disabling the harness's dispatch/function modes from the candidate's code."""
        pd = sys.modules.get("torch.utils._python_dispatch")
        targets = []
        for owner, names in ((pd, ("_pop_mode", "_pop_mode_temporarily", "_disable_current_modes")),
                             (torch._C, ("_pop_torch_dispatch_mode", "_pop_torch_function_mode",
                                         "_set_dispatch_mode", "_unset_dispatch_mode",
                                         # dispatch-key guards that step around every Python mode
                                         # (torch.utils._mode_utils.no_dispatch is the first)
                                         "_DisableTorchDispatch", "_ExcludeDispatchKeyGuard",
                                         "_ForceDispatchKeyGuard", "_dispatch_tls_set_dispatch_key_excluded",
                                         "_dispatch_tls_set_dispatch_key_included")),
                             # whether the profiler is on tells nothing a kernel needs, and everything
                             # a kernel switching its behaviour under measurement needs
                             (torch._C._autograd, ("_profiler_enabled", "_kineto_step")),
                             (torch.autograd, ("_profiler_enabled",))):
            for n in names:
                fn = getattr(owner, n, None) if owner is not None else None
                if fn is not None:
                    targets.append(fn)
        self._wrap_everywhere(targets, lambda o: self._guarded(o, "forbidden_operation",
                                                               f"torch.{getattr(o, '__name__', '?')}"))

    def _guard_cuda_runtime(self, torch: Any) -> None:
        """The CUDA runtime's Python bindings (``torch.cuda.cudart()``, ``torch._C._cudart``) and the
        CUDA profiler's switches. ``cudaHostRegister`` maps any of the worker's host memory into the
        device's address space (a kernel could then write the harness's memory), and
        ``cudaProfilerStart/Stop`` steer the profiling whose records time the calls; no kernel needs
        either. Every function of the bindings is refused to the candidate (they are replaced on the
        bindings' module itself, which is not in ``sys.modules``), and so are the accessor and
        ``torch.cuda.profiler``'s entry points (which call the bindings from torch's own frames)."""
        rt = getattr(torch._C, "_cudart", None)
        if rt is not None:
            for name in dir(rt):
                fn = getattr(rt, name, None)
                if name.startswith("cuda") and callable(fn):
                    setattr(rt, name, self._guarded(fn, "forbidden_operation", f"torch.cuda.cudart().{name}"))
        prof = sys.modules.get("torch.cuda.profiler")
        targets = [getattr(torch.cuda, "cudart", None)]
        targets += [getattr(prof, n, None) for n in ("init", "start", "stop", "profile")] if prof is not None else []
        self._wrap_everywhere([t for t in targets if t is not None],
                              lambda o: self._guarded(o, "forbidden_operation", f"torch.cuda.{getattr(o, '__name__', '?')}"))

    def _guard_registrations(self, torch: Any) -> None:
        """Operator registrations (``torch.library``: new kernels for aten operators, custom ops)
        and finalizers called directly by the candidate, and the collector's switches. Torch registers operators lazily on its
        own, so counting registrations would blame the candidate for torch's work; the entry
        points are guarded instead (a call from torch itself is not the candidate's)."""
        import weakref

        lib = sys.modules.get("torch.library")
        if lib is not None:
            cls = getattr(lib, "Library", None)
            for name in ("__init__", "impl", "define", "fallback", "_register_fake", "_impl_with_aoti_compile"):
                fn = getattr(cls, name, None) if cls is not None else None
                if fn is not None:
                    setattr(cls, name, self._guarded(fn, "forbidden_operation", f"torch.library.Library.{name}"))
            funcs = [getattr(lib, n) for n in ("impl", "define", "custom_op", "register_kernel", "register_fake",
                                                "register_autograd", "register_torch_dispatch", "register_vmap",
                                                "triton_op", "wrap_triton") if hasattr(lib, n)]
            self._wrap_everywhere(funcs, lambda o: self._guarded(o, "forbidden_operation",
                                                                 f"torch.library.{getattr(o, '__name__', '?')}"))
        fin = weakref.finalize
        fin.__init__ = self._guarded(fin.__init__, "forbidden_operation", "weakref.finalize")
        # automatic collection is off in the worker, so finalisers run only inside a call's window
        # (drkernel.env.process.harness.Harness._release); ``gc`` is reachable through torch's modules
        import gc

        self._wrap_everywhere([gc.enable, gc.set_threshold],
                              lambda o: self._guarded(o, "forbidden_operation", f"gc.{o.__name__}"))

    def _guard_conversions(self, torch: Any) -> None:
        """Tensor data moved to or from the host by the candidate: recorded as ``host_compute`` (the
        call itself proceeds). ``Tensor.numpy/tolist/__array__/__dlpack__``; ``to_dlpack`` (every
        reference to ``torch._C._to_dlpack``); tensors over NumPy's memory (``from_numpy``,
        ``frombuffer``), which Triton kernels could fill for NumPy to compute on; and a storage's
        bytes on the host: its pickling (the raw data rides along), indexing, lists, ``from_buffer``."""
        dlpack = [getattr(torch._C, n) for n in ("_to_dlpack", "_to_dlpack_versioned") if hasattr(torch._C, n)]
        self._wrap_everywhere(dlpack, lambda o: self._guarded(o, "host_compute", "torch.utils.dlpack.to_dlpack()",
                                                              refuse=False))
        shared = [getattr(torch, n) for n in ("from_numpy", "frombuffer") if hasattr(torch, n)]
        self._wrap_everywhere(shared, lambda o: self._guarded(o, "host_compute", f"torch.{o.__name__}()",
                                                              refuse=False))
        for cls in (torch.UntypedStorage, getattr(torch, "TypedStorage", None)):
            if cls is None:
                continue
            for name in ("__reduce__", "__reduce_ex__", "__getitem__", "__setitem__", "__iter__", "tolist",
                         "_write_file", "__getstate__"):
                self._record_method(cls, name, "host_compute")
            bound = getattr(cls, "from_buffer", None)
            if bound is not None:
                setattr(cls, "from_buffer", staticmethod(self._guarded(bound, "host_compute",
                                                                       f"{cls.__name__}.from_buffer()", refuse=False)))
        for name in ("numpy", "tolist", "__array__", "__dlpack__"):
            self._record_method(torch.Tensor, name, "host_compute")
        # raw memory behind an integer (a tensor's data_ptr()): NumPy's ctypes bridge and ctypes'
        # own casts and copies run in library or standard-library frames, which the audit hook does
        # not blame, and raise no audit event; reachable as numpy.ctypeslib.ctypes. Refused.
        import ctypes

        raw = [getattr(ctypes, n) for n in ("cast", "memmove", "memset", "string_at", "wstring_at")
               if hasattr(ctypes, n)]
        try:
            import numpy.ctypeslib as npc
        except ImportError:  # pragma: no cover - numpy is a dependency
            npc = None
        if npc is not None:
            raw += [getattr(npc, n) for n in ("as_array", "as_ctypes", "as_ctypes_type") if hasattr(npc, n)]
        self._wrap_everywhere(raw, lambda o: self._guarded(o, "forbidden_operation",
                                                           f"ctypes/numpy.ctypeslib {getattr(o, '__name__', '?')}()"))


_PATH_EVENTS = frozenset({"open", "os.listdir", "os.scandir", "os.mkdir", "os.remove", "os.rmdir", "os.rename",
                          "os.replace", "os.truncate", "os.utime", "os.chmod", "shutil.rmtree", "tempfile.mkstemp",
                          "tempfile.mkdtemp", "os.link", "os.symlink"})


def _inside(args: tuple, root: str) -> bool:
    """Every path among an audited event's arguments lies inside ``root`` (symlinks resolved)."""
    paths = [a for a in args if isinstance(a, (str, bytes, os.PathLike))]
    if not paths:
        return all(isinstance(a, int) or a is None for a in args[:1])  # an already open descriptor
    prefix = root.rstrip(os.sep) + os.sep
    for p in paths:
        try:
            real = os.path.realpath(os.fsdecode(p))
        except (TypeError, ValueError):
            return False
        if not (real + os.sep).startswith(prefix):
            return False
    return True


def _where(frame: Any) -> str:
    return f"{os.path.basename(frame.f_code.co_filename)}:{frame.f_lineno}"


def _describe(event: str, args: tuple) -> str:
    """A short, safe description of an audited event (never calls the candidate's objects)."""
    if event == "open" and args:
        return f"open({_safe(args[0])})"
    if event == "import" and args:
        return f"import {_safe(args[0])}"
    if event == "object.__getattr__" and len(args) >= 2:
        return f"reading .{_safe(args[1])} of a {type(args[0]).__name__}"
    if event in ("object.__setattr__", "object.__delattr__") and len(args) >= 2:
        return f"setting .{_safe(args[1])} of a {type(args[0]).__name__}"
    if event.startswith("socket."):
        return f"network ({event})"
    return event


def _safe(value: Any) -> str:
    if isinstance(value, (str, bytes, int)):
        return repr(value)[:80]
    return type(value).__name__


def innermost_actor(auditor: Auditor, frame: Any) -> str:
    """Who runs the code at ``frame``, skipping torch and the standard library: ``triton`` (inside a
    Triton launch, e.g. the interpreter moving arguments), ``candidate`` (the candidate's own code,
    including a kernel body run by the interpreter or a launch grid callable) or ``harness``."""
    std, trusted = auditor._std, auditor._trusted
    while frame is not None:
        fn = frame.f_code.co_filename
        if not fn.startswith(trusted) and (fn.startswith("<frozen") or fn.startswith(std)):
            frame = frame.f_back
            continue
        if fn.startswith(trusted):
            norm = fn.replace(os.sep, "/")
            if "/triton/" in norm:
                return "triton"
            if "/drkernel/" in norm:
                return "harness"
            frame = frame.f_back  # torch, numpy: look further out
            continue
        return "candidate"
    return "harness"


# -- the global-state fingerprint ------------------------------------------------------------------------
#: Modules whose bindings the harness's own code depends on after the candidate loaded (drawing
#: inputs, moving outputs, encoding replies) and the ones a candidate would patch to change what
#: it is measured on. Torch and Triton rebind some of their own module attributes lazily (Dynamo
#: wraps ``torch.manual_seed`` when first imported, the interpreter swaps ``triton.language.core``
#: functions while a kernel runs), so those are watched by name, not wholesale.
_WATCH_MODULES = ("builtins", "json", "json.encoder", "json.decoder", "multiprocessing.connection", "struct", "time",
                  "os", "posix", "math", "operator", "functools", "threading", "_thread", "numpy", "torch",
                  "torch.nn.functional", "torch.functional", "torch._tensor", "torch.cuda", "torch.autograd",
                  "torch.autograd.grad_mode", "torch.profiler", "torch.profiler.profiler", "torch.autograd.profiler",
                  "torch.nn.modules.module", "torch.overrides", "torch.utils._python_dispatch", "triton",
                  "triton.runtime.jit", "triton.runtime.interpreter", "triton.compiler.compiler",
                  "triton.backends.nvidia.driver", "triton.runtime.cache", "triton.knobs")
#: Modules where a *new* name matters too (it could shadow a builtin the harness's code looks up).
_STRICT_PREFIXES = ("drkernel.", "builtins", "multiprocessing.connection", "json", "struct", "time")
#: Rebinding torch does itself, lazily (not the candidate's).
LAZY_REBINDS = frozenset({"torch.manual_seed", "torch.compile", "torch._dynamo"})


class StateGuard:
    """A fingerprint of process-wide state, compared before/after the candidate runs."""

    def __init__(self, torch: Any, extra_classes: tuple = ()):
        self.torch = torch
        self.extra_classes = extra_classes
        self._builtin_names = frozenset(vars(__import__("builtins")))
        # (name, the live namespace, a copy of it at the snapshot): bindings are compared by identity
        # against the objects themselves, never through ``id()``, which is an audit event (the audit
        # hook ran for each of ~300 class attributes after every timed call: ~0.35 ms a call on a
        # CPU, ~1.1 ms on an H100 host, inside the GPU's exclusive hold); and an object kept here
        # cannot be freed and its id reused by the object that replaced it.
        self._modules: list[tuple[str, Any, dict[str, Any]]] = []
        self._classes: list[tuple[str, Any, dict[str, Any]]] = []
        self._values: dict[str, Any] = {}
        self._len_objects: list[tuple[str, Any, int]] = []
        import gc

        self._gc_state = (gc.isenabled, gc.get_threshold)  # bound before the candidate loads
        self._read = self._readers()

    # what is watched --------------------------------------------------------------------------------
    def _watched_classes(self) -> list[tuple[str, type]]:
        torch = self.torch
        out: list[tuple[str, type]] = [("torch.Tensor", torch.Tensor), ("torch.nn.Module", torch.nn.Module),
                                       ("torch.nn.Parameter", torch.nn.Parameter)]
        for path in ("torch.cuda.Event", "torch.cuda.Stream", "torch.profiler.profile",
                     "torch.autograd.profiler.profile", "torch._C._autograd._KinetoEvent",
                     "torch.utils._python_dispatch.TorchDispatchMode", "torch.overrides.TorchFunctionMode",
                     "multiprocessing.connection.Connection", "triton.runtime.jit.JITFunction",
                     "triton.runtime.jit.KernelInterface", "triton.runtime.interpreter.InterpretedFunction",
                     "triton.runtime.interpreter.GridExecutor",
                     # the CPU's emulation of a GPU (drkernel.env.process.interpreter): replaced before the snapshot
                     "triton.runtime.interpreter.InterpreterBuilder", "triton.runtime.interpreter.ReduceOps",
                     "triton.runtime.autotuner.Autotuner", "triton.compiler.compiler.CompiledKernel",
                     "triton.backends.nvidia.driver.CudaLauncher"):
            obj = _resolve(path)
            if isinstance(obj, type):
                out.append((path, obj))
        out.extend(self.extra_classes)
        return out

    def _readers(self) -> list[tuple[str, Callable[[], Any]]]:
        """How each flag is read, bound now (at construction, before the candidate loads): torch's
        C getters, never the Python properties and functions of ``torch.backends`` or ``torch.cuda``
        (a module or object there replaced by the candidate's would run its code inside this check,
        and the records' request runs it outside the GPU gate); ``sys``, ``gc``, ``threading`` and
        torch's hook registries read through their modules' real namespaces, and a length taken only
        of an exact list or dict (a value of another type is a change by itself)."""
        torch = self.torch
        C = torch._C
        module_dict = ModuleType.__dict__["__dict__"].__get__
        import gc
        import threading

        sys_ns, gc_ns, threading_ns = module_dict(sys), module_dict(gc), module_dict(threading)
        exact = (list, dict, collections.OrderedDict)
        type_, len_ = type, len

        def size(ns: dict[str, Any], name: str) -> Any:
            value = ns.get(name)
            return len_(value) if type_(value) in exact else f"a {type_(value).__name__}"

        getters = [(name, getattr(C, attr, None)) for name, attr in (
            ("cuda.matmul.allow_tf32", "_get_cublas_allow_tf32"),
            ("cuda.matmul.allow_fp16_reduced", "_get_cublas_allow_fp16_reduced_precision_reduction"),
            ("cuda.matmul.allow_bf16_reduced", "_get_cublas_allow_bf16_reduced_precision_reduction"),
            ("cudnn.allow_tf32", "_get_cudnn_allow_tf32"), ("cudnn.enabled", "_get_cudnn_enabled"),
            ("cudnn.benchmark", "_get_cudnn_benchmark"), ("cudnn.deterministic", "_get_cudnn_deterministic"),
            ("float32_matmul_precision", "_get_float32_matmul_precision"),
            ("deterministic_algorithms", "_get_deterministic_algorithms"), ("num_threads", "get_num_threads"),
            ("grad_enabled", "is_grad_enabled"), ("inference_mode", "is_inference_mode_enabled"),
            ("torch_function_modes", "_len_torch_function_stack"),
            ("torch_dispatch_modes", "_len_torch_dispatch_stack"))]
        out = [(name, fn) for name, fn in getters if fn is not None]
        default_dtype, default_device = C.get_default_dtype, getattr(C, "_get_default_device", None)
        out.append(("default_dtype", lambda: str(default_dtype())))
        if default_device is not None:
            out.append(("default_device", lambda: str(default_device())))
        autocast = C.is_autocast_enabled
        out.append(("autocast", lambda: (autocast("cuda"), autocast("cpu"))))
        gettrace, getprofile = sys.gettrace, sys.getprofile
        out += [("sys.gettrace", lambda: gettrace() is None), ("sys.getprofile", lambda: getprofile() is None),
                ("sys.meta_path", lambda: size(sys_ns, "meta_path")),
                ("sys.path_hooks", lambda: size(sys_ns, "path_hooks")),
                ("sys.excepthook", lambda: _Same(sys_ns.get("excepthook"))),
                ("sys.unraisablehook", lambda: _Same(sys_ns.get("unraisablehook"))),
                ("gc.callbacks", lambda: size(gc_ns, "callbacks")),
                ("gc.enabled", self._gc_state[0]), ("gc.threshold", self._gc_state[1]),
                ("threading.trace_hook", lambda: threading_ns.get("_trace_hook") is None),
                ("threading.profile_hook", lambda: threading_ns.get("_profile_hook") is None)]
        enabled = C._autograd._profiler_enabled
        out.append(("profiler_enabled", lambda: bool(enabled())))
        get_device, get_stream = getattr(C, "_cuda_getDevice", None), getattr(C, "_cuda_getCurrentStream", None)
        if get_device is not None and torch.cuda.is_available() and torch.cuda.is_initialized():
            out.append(("cuda.current_device", get_device))
            if get_stream is not None:
                out.append(("cuda.current_stream", lambda: tuple(get_stream(get_device()))))
        mm = sys.modules.get("torch.nn.modules.module")
        if mm is not None:
            mm_ns = module_dict(mm)
            for name in sorted(k for k in mm_ns if type(k) is str and k.startswith("_global_")
                               and type(mm_ns[k]) in exact):
                out.append((f"nn.Module {name}", lambda n=name: size(mm_ns, n)))
        return out

    def _flags(self) -> dict[str, Any]:
        f: dict[str, Any] = {}
        for name, read in self._read:
            try:
                f[name] = read()
            except Exception as exc:  # noqa: BLE001
                f[name] = f"unreadable: {type(exc).__name__}"
        return f

    # snapshot / compare ----------------------------------------------------------------------------
    def snapshot(self) -> None:
        self._modules = []
        for name, mod in list(sys.modules.items()):
            if mod is None or not (name in _WATCH_MODULES or name.startswith("drkernel.env")):
                continue
            d = getattr(mod, "__dict__", None)
            if isinstance(d, dict):
                self._modules.append((name, d, dict(d)))
        self._classes = [(name, cls.__dict__, dict(cls.__dict__)) for name, cls in self._watched_classes()]
        self._values = self._flags()

    def changes(self, full: bool = True) -> list[str]:
        """What differs from the snapshot (``full``: also the watched modules, a few ms)."""
        out: list[str] = []
        for name, d, snap in self._classes:
            out.extend(_dict_changes(name, d, snap, strict=True, builtin_names=frozenset()))
        if full:
            for name, d, snap in self._modules:
                strict = name.startswith(_STRICT_PREFIXES)
                out.extend(c for c in _dict_changes(name, d, snap, strict=strict, builtin_names=self._builtin_names)
                           if c.rsplit(" was ", 1)[0] not in LAZY_REBINDS)
        now = self._flags()
        for key, value in now.items():
            if key in self._values and self._values[key] != value:
                out.append(f"{key}: {self._values[key]!r} -> {value!r}")
        return out

    def accept(self, keys: list[str]) -> None:
        """Take the current values of some flags as the new baseline (the harness changed them)."""
        now = self._flags()
        for k in keys:
            if k in now:
                self._values[k] = now[k]


class _Same:
    """A flag's value compared by identity (``id()`` is an audit event; the object's own ``==`` is
    the candidate's to define)."""

    __slots__ = ("obj",)

    def __init__(self, obj: Any):
        self.obj = obj

    def __eq__(self, other: object) -> bool:
        return type(other) is _Same and other.obj is self.obj

    def __ne__(self, other: object) -> bool:
        return not self.__eq__(other)

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:  # never the candidate's own __repr__ (it could raise or never return)
        return object.__repr__(self.obj)


def _dict_changes(name: str, d: Any, snap: dict[str, Any], *, strict: bool, builtin_names: frozenset) -> list[str]:
    """What differs between namespace ``d`` now and ``snap``, its copy: names rebound (to another
    object: ``is``, not ``==``, which the new object could answer), deleted, or added (``strict``,
    or shadowing a builtin). At most 8."""
    out = []
    items = list(d.items())  # (no key is hashed or compared before it is known to be an exact str:
    if not all(type(k) is str for k, _ in items):  # a key's own __hash__ or __eq__ is the candidate's code)
        return [f"{name} has a key that is not a str"]
    if len(items) == len(snap) and all(map(snap.__contains__, (k for k, _ in items))):
        changed = [k for k, v in items if snap[k] is not v]
        return [f"{name}.{k} was rebound" for k in changed[:8]]
    for k, old in snap.items():
        if k not in d:
            out.append(f"{name}.{k} was deleted")
        elif d[k] is not old:
            out.append(f"{name}.{k} was rebound")
    for k, v in items:
        if k not in snap and (strict or k in builtin_names) and not issubclass(type(v), ModuleType):
            out.append(f"{name}.{k} was added")  # (a submodule appearing on its package is an import)
    return out[:8]


def _resolve(path: str) -> Any:
    parts = path.split(".")
    for i in range(len(parts), 0, -1):
        mod = sys.modules.get(".".join(parts[:i]))
        if mod is not None:
            obj = mod
            try:
                for p in parts[i:]:
                    obj = getattr(obj, p)
            except AttributeError:
                return None
            return obj
    return None


__all__ = ["Auditor", "StateGuard", "ALLOWED_IMPORTS", "ALLOWED_EVENTS", "sealed", "sealed_ledger", "innermost_actor"]
