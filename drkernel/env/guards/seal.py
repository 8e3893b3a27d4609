"""The harness's own namespaces, checked in the candidate's process without looking anything up.

The worker's code after a call (its checks, the spot questions, the device records' readout, the
reply) is looked up at run time in namespaces the candidate's code can reach and rebind without an
audit event: the modules of drkernel (through ``torch.sys.modules``), their classes (through
``object.__subclasses__()``), ``builtins``, and the cells of the guards' closures. A rebinding there
that restores itself once used would run the candidate's code inside the harness's own steps and
leave nothing for a later check to see; used to answer for the harness (a spot question never
asked, a kept output swapped, device records filtered) it would forge what the grader reads.

:func:`make_seal` takes a snapshot of those namespaces (the objects themselves) once the harness is
set up, right before the candidate's module is imported, and returns ``check()``: every binding
compared by identity, through functions bound in its own closure (nothing it calls can be rebound),
in about 0.1 ms. The worker calls it after every stretch of code that could run the candidate's
(the forward, torch's Python in the checks, the profiler's stop) and before its own code runs on, so
a rebinding is seen before it can be used; on a difference it ends the process at once with
:data:`EXIT_TAMPERED` (``os._exit``, bound here too), which the grader reports as
``harness_tampered``. New submodules appearing on a package (the harness's own late imports) are not
differences.
"""

from __future__ import annotations

import builtins
import itertools
import operator
import os
import sys
import types
from typing import Any, Callable, Iterable

EXIT_TAMPERED = 86
"""The worker's exit status when the seal found the harness's namespaces changed."""


def make_seal(prefixes: tuple[str, ...] = ("drkernel",), cells: Iterable[Any] = (),
              zero: Iterable[tuple[str, Callable[[], int]]] = (), classes: Iterable[type] = (),
              objects: Iterable[tuple[str, Any]] = (), libraries: Iterable[str] = (),
              lazy: frozenset[str] = frozenset()) -> Callable[[str], None]:
    """``check(where)``: returns if nothing changed, else ends the process (module docstring).
    ``zero``: ``(what, probe)`` pairs whose C-level probe must read 0 at every check (the torch
    function and dispatch mode stacks: a mode left active answers for the harness's own tensor
    operations, the L2 flush among them). ``classes``: more classes of the harness's that are not
    module attributes (the CPU's cost-counting mode, made in a function) or library classes whose
    methods the harness calls between calls (``torch.Tensor``, ``torch.nn.Parameter``: a method
    added there shadows the C one). ``objects``: ``(name, instance)`` of harness objects the
    candidate can reach (the launch recorder, through Triton's hook): their attributes.
    ``libraries``: library modules whose bindings the harness's code looks up between the calls
    (torch's top level: the task's ``get_inputs`` draws the next call's inputs through it, and a
    rebinding there would see them before the call); ``lazy``: ``"module.name"`` bindings the
    library rebinds itself (never looked up by the harness between calls): not differences."""
    module_dict = types.ModuleType.__dict__["__dict__"].__get__  # a module's real namespace
    class_dict = type.__dict__["__dict__"].__get__  # a class's own namespace, whatever its metaclass
    cell_type = type((lambda: prefixes).__closure__[0])
    cell_contents = cell_type.__dict__["cell_contents"].__get__
    modules = sys.modules
    names = sorted(n for n in list(modules) if modules[n] is not None
                   and any(n == p or n.startswith(p + ".") for p in prefixes))
    spaces: list[tuple[str, Any, tuple]] = []
    keys: dict[int, tuple] = {}  # namespace id -> its keys at the snapshot (for the slow path)
    seen: set[int] = set()
    for name in names + ["builtins"]:
        ns = module_dict(modules[name] if name != "builtins" else builtins)
        spaces.append((name, ns, tuple(ns.values())))
        for value in tuple(ns.values()):
            owner = getattr(value, "__module__", None) if isinstance(value, type) else None
            if isinstance(owner, str) and any(owner == p or owner.startswith(p + ".") for p in prefixes) \
                    and id(value) not in seen:
                seen.add(id(value))
                proxy = class_dict(value)
                spaces.append((f"{owner}.{value.__qualname__}", proxy, tuple(proxy.values())))
    for cls in classes:
        if id(cls) not in seen:
            seen.add(id(cls))
            proxy = class_dict(cls)
            spaces.append((f"{cls.__module__}.{cls.__qualname__}", proxy, tuple(proxy.values())))
    for name in libraries:
        mod = modules.get(name)
        if mod is not None and id(mod) not in seen:
            seen.add(id(mod))
            ns = module_dict(mod)
            spaces.append((name, ns, tuple(ns.values())))

    for name, obj in objects:
        ns = object.__getattribute__(obj, "__dict__")
        spaces.append((name, ns, tuple(ns.values())))
    mods = tuple((n, modules[n]) for n in names)
    # what each sealed module and object is: a module's class swapped for one with its own
    # __getattribute__ answers every lookup through it without touching its namespace
    kinds = tuple((m, type(m)) for m in [builtins, *(modules[n] for n in names),
                                          *(modules[n] for n in libraries if modules.get(n) is not None),
                                          *(obj for _, obj in objects)])
    cell_snap = tuple((c, cell_contents(c)) for c in cells)
    probes = tuple(zero)
    is_, is_not, len_, all_, map_, tuple_, enumerate_ = operator.is_, operator.is_not, len, all, map, tuple, enumerate
    zip_, frozenset_, type_, str_ = zip, frozenset, type, str
    get, exit_, module_type = modules.get, os._exit, types.ModuleType
    repeat_ = itertools.repeat
    write, stderr_fd = os.write, 2

    for _, ns, _ in spaces:
        keys[id(ns)] = tuple(ns.keys())
    lazy_keys = frozenset(lazy)
    id_ = id

    def _benign(name: str, ns: Any, before: tuple, where: str) -> bool:
        """Whether ``ns`` differs from ``before`` only by new module values (a package's late
        imports) and by the library's own lazy rebindings (``lazy``)."""
        for k in ns:  # (iterating keys runs no code of a key's; hashing or comparing one might)
            if type_(k) is not str_:
                _tampered(f"{name} has a key that is not a str ({where})")
        old_keys = keys[id_(ns)]
        for k, v in zip_(old_keys, before):
            if (name + "." + k) in lazy_keys:
                continue
            if k not in ns or is_not(ns[k], v):
                return False
        old = frozenset_(old_keys)
        for k, v in ns.items():
            # (the exact type: isinstance would read the value's __class__, which a property answers)
            if k not in old and type_(v) is not module_type and (name + "." + k) not in lazy_keys:
                return False
        keys[id_(ns)] = tuple_(ns.keys())
        return True

    def check(where: str) -> None:
        for what, probe in probes:
            if probe():
                _tampered(f"{what} is not empty ({where})")
        for i, (name, ns, before) in enumerate_(spaces):
            now = ns.values()
            if len_(now) != len_(before) or not all_(map_(is_, now, before)):
                if _benign(name, ns, before, where):
                    spaces[i] = (name, ns, tuple_(ns.values()))
                    continue
                _tampered(f"{name} was changed ({where})")
        for obj, kind in kinds:
            if is_not(type_(obj), kind):
                _tampered(f"a sealed module's or object's class was replaced ({where})")
        if not all_(map_(is_, map_(type_, modules), repeat_(str_))):  # before hashing our names into it
            _tampered(f"sys.modules has a key that is not a str ({where})")
        for name, mod in mods:
            if is_not(get(name), mod):
                _tampered(f"sys.modules[{name!r}] was replaced ({where})")
        for cell, value in cell_snap:
            if is_not(cell_contents(cell), value):
                _tampered(f"a guard's closure was rewritten ({where})")

    def _tampered(message: str) -> None:
        try:
            write(stderr_fd, ("drkernel: harness tampered: " + message + "\n").encode("utf-8", "replace"))
        finally:
            exit_(EXIT_TAMPERED)

    return check


__all__ = ["make_seal", "EXIT_TAMPERED"]
