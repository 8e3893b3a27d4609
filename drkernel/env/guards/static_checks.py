"""Static hack checks on the candidate's syntax tree (AST, not regex).

Each finding has a short id that ends up in ``EvalResult.hack_reasons`` (the one table of ids, what
they mean and what the model is told: :mod:`drkernel.env.guards.hacks`):

================== ==========================================================================
id                 what it flags (peers-and-hacks.md §2 pattern)
================== ==========================================================================
no_triton_kernel   no ``@triton.jit`` / ``@triton.autotune`` function is defined (#1, #2)
forward_no_launch  ``ModelNew.forward`` cannot reach any Triton kernel (#2 decoy)
try_except         try/except in the candidate's code (fallback to PyTorch, #3)
reference_access   subclassing the reference, ``super().forward``, importing unknown modules (#4, #24)
threads            threads, processes, ``os.fork``, async executors (#12)
cuda_stream        CUDA stream or graph creation / switching (#11)
tensor_subclass    ``torch.Tensor`` subclasses, ``__torch_function__``/``__torch_dispatch__`` (#13)
timing_module      imports time or timeit (timing is the grader's job)
timer_patch        assigning to / ``setattr`` on library attributes: timers, checkers (#14)
global_state       TF32 switches, matmul precision, default dtype, seeds (#17, #18)
output_cache       functools caches, module-level containers mutated at run time, ``global``,
                   state stored on ``self`` during forward (#15, #16)
introspection      gc, inspect, sys, importlib, ctypes, exec/eval, frame and ``__dict__`` access, torch._C,
                   ``super(...)`` with arguments (#14, #24)
file_access        os, pathlib, io, pickle, sockets, ``open``, ``torch.load``/``save`` (#22, #24)
idle_wait          a string naming a GPU clock or sleep (``%globaltimer``, ``%clock64``, ``nanosleep``): a
                   kernel that waits pads its own time (coverage is bounded by the work outside it against
                   the reference's time in any case)
kernel_python      a ``@triton.jit`` body calls something Triton cannot compile: a module-level
                   Python function, a NumPy or torch function, or reaches a value's ``.handle`` (the
                   interpreter would run it on the host; the GPU compiler refuses it)
================== ==========================================================================

The checks are deliberately strict: a kernel that needs none of these things loses nothing, and
the runtime checks (launch records, fresh inputs, spot checks) back them up.
"""

from __future__ import annotations

import ast
import threading
from dataclasses import dataclass, field

_KERNEL_DECORATORS = {"jit", "autotune", "heuristics"}

_ALLOWED_IMPORTS = {
    "torch", "triton", "math", "numpy", "typing", "typing_extensions", "dataclasses", "functools",
    "itertools", "operator", "collections", "enum", "abc", "__future__", "warnings", "numbers",
}
_BANNED_IMPORTS = {
    "threads": {"threading", "_thread", "multiprocessing", "concurrent", "subprocess", "asyncio", "sched"},
    "introspection": {"gc", "inspect", "sys", "importlib", "builtins", "ctypes", "types", "traceback",
                      "weakref", "dis", "code", "codeop", "runpy", "pkgutil", "atexit", "signal", "faulthandler",
                      "linecache", "marshal", "cffi"},
    "file_access": {"os", "pathlib", "io", "shutil", "pickle", "tempfile", "socket", "glob", "mmap", "urllib",
                    "requests", "http", "json", "shelve", "sqlite3", "dbm", "fcntl", "posix", "zipfile",
                    "tarfile", "csv", "h5py", "safetensors"},
    "timing_module": {"time", "timeit"},
}
_INTROSPECTION_NAMES = {"__import__", "exec", "eval", "compile", "globals", "locals", "vars", "breakpoint",
                        "__builtins__", "getattr", "delattr"}
_INTROSPECTION_ATTRS = {"__dict__", "__globals__", "__code__", "__closure__", "__subclasses__", "__bases__",
                        "__mro__", "f_back", "f_globals", "f_locals", "_getframe", "__builtins__", "modules",
                        "__self__", "__func__", "__wrapped__", "gi_frame", "tb_frame", "_C", "TensorBase",
                        "_python_dispatch", "sys", "__class__", "__defaults__", "__kwdefaults__", "cell_contents",
                        "_getframemodulename", "_current_frames"}
_STREAM_ATTRS = {"Stream", "ExternalStream", "stream", "set_stream", "CUDAGraph", "graph", "StreamContext",
                 "make_graphed_callables", "default_stream", "current_stream"}
_GLOBAL_STATE_CALLS = {"set_float32_matmul_precision", "set_default_dtype", "set_default_tensor_type",
                       "manual_seed", "manual_seed_all", "seed", "use_deterministic_algorithms",
                       "set_flush_denormal", "set_num_threads", "set_rng_state", "set_per_process_memory_fraction"}
_FILE_CALLS = {"open", "load", "save", "fromfile", "tofile", "from_file", "loadtxt", "savetxt"}
_TENSOR_SUBCLASS_CALLS = {"_make_subclass", "_make_wrapper_subclass", "as_subclass"}
_CACHE_DECORATORS = {"cache", "lru_cache", "cached_property"}
_WAIT_TOKENS = ("globaltimer", "%clock", "clock64", "nanosleep")
_MUTABLE_FACTORIES = {"dict", "list", "set", "OrderedDict", "defaultdict", "deque", "WeakKeyDictionary",
                      "WeakValueDictionary", "Counter"}


@dataclass
class Finding:
    id: str
    message: str
    line: int


@dataclass
class StaticReport:
    """What the static pass found. ``syntax_error``/``missing_class`` are compile failures, not hacks."""

    findings: list[Finding] = field(default_factory=list)
    kernels: list[str] = field(default_factory=list)
    syntax_error: str | None = None
    missing_class: str | None = None

    @property
    def hack_reasons(self) -> list[str]:
        seen: list[str] = []
        for f in self.findings:
            if f.id not in seen:
                seen.append(f.id)
        return seen

    def messages(self) -> list[str]:
        return [f"{f.id} (line {f.line}): {f.message}" for f in self.findings]


def _dotted(node: ast.AST) -> str | None:
    """``a.b.c`` for a Name/Attribute chain, else None."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
        return ".".join(reversed(parts))
    return None


def _root_name(node: ast.AST) -> str | None:
    while isinstance(node, (ast.Attribute, ast.Subscript, ast.Call)):
        node = node.func if isinstance(node, ast.Call) else node.value
    return node.id if isinstance(node, ast.Name) else None


def _is_kernel_decorator(dec: ast.AST) -> bool:
    target = dec.func if isinstance(dec, ast.Call) else dec
    name = _dotted(target)
    return bool(name) and name.split(".")[-1] in _KERNEL_DECORATORS


class _Checker(ast.NodeVisitor):
    def __init__(self, entry_point: str, top_level: set[str] | None = None):
        self.entry_point = entry_point
        self.top_level = top_level or set()
        """Names of the module's own functions and classes (state stored on them outlives a call)."""
        self.findings: list[Finding] = []
        self.module_aliases: dict[str, str] = {}  # local name -> imported module root
        self.kernels: set[str] = set()
        self.functions: dict[str, ast.AST] = {}  # module-level functions and classes' methods "Cls.meth"
        self.classes: dict[str, ast.ClassDef] = {}
        self.module_mutables: set[str] = set()
        self.module_constants: set[str] = set()
        """Module-level names bound to a literal number/string/bool or ``tl.constexpr(literal)``."""
        self.module_globals: set[str] = set()
        """Every name bound by a module-level assignment."""
        self._func_depth = 0

    def add(self, id_: str, node: ast.AST, message: str) -> None:
        self.findings.append(Finding(id_, message, getattr(node, "lineno", 0)))

    # -- imports ------------------------------------------------------------------------------
    def _check_module(self, node: ast.AST, module: str) -> None:
        root = module.split(".")[0]
        for id_, banned in _BANNED_IMPORTS.items():
            if root in banned:
                self.add(id_, node, f"imports {module}")
                return
        if root not in _ALLOWED_IMPORTS:
            self.add("reference_access", node, f"imports {module}, which is not an allowed kernel dependency")

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            self._check_module(node, alias.name)
            self.module_aliases[alias.asname or alias.name.split(".")[0]] = alias.name.split(".")[0]
        self.generic_visit(node)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        if node.level:
            self.add("reference_access", node, "relative import (could reach the reference)")
        module = node.module or ""
        self._check_module(node, module)
        for alias in node.names:
            full = f"{module}.{alias.name}"
            if alias.name in _CACHE_DECORATORS and module == "functools":
                self.add("output_cache", node, f"imports functools.{alias.name}")
            if alias.name in _STREAM_ATTRS and module.startswith("torch"):
                self.add("cuda_stream", node, f"imports {full}")
            if alias.name in _GLOBAL_STATE_CALLS and module.startswith("torch"):
                self.add("global_state", node, f"imports {full}")
            self.module_aliases[alias.asname or alias.name] = module.split(".")[0]
        self.generic_visit(node)

    # -- definitions --------------------------------------------------------------------------
    def visit_FunctionDef(self, node: ast.FunctionDef) -> None:
        if any(_is_kernel_decorator(d) for d in node.decorator_list):
            self.kernels.add(node.name)
        for dec in node.decorator_list:
            name = _dotted(dec.func if isinstance(dec, ast.Call) else dec) or ""
            if name.split(".")[-1] in _CACHE_DECORATORS:
                self.add("output_cache", dec, f"@{name} caches results across calls")
        if node.name in ("__torch_function__", "__torch_dispatch__"):
            self.add("tensor_subclass", node, f"defines {node.name}")
        for default in list(node.args.defaults) + [d for d in node.args.kw_defaults if d is not None]:
            if _is_mutable_literal(default):
                self.add("output_cache", default, f"{node.name}() has a mutable default argument: state kept "
                         "across calls")
        if self._func_depth == 0:
            self.functions[node.name] = node
        self._func_depth += 1
        self.generic_visit(node)
        self._func_depth -= 1

    visit_AsyncFunctionDef = visit_FunctionDef  # type: ignore[assignment]

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        self.classes[node.name] = node
        for base in node.bases:
            name = _dotted(base) or ""
            if name.split(".")[-1] == "Tensor":
                self.add("tensor_subclass", node, f"class {node.name} subclasses {name}")
            if name.split(".")[-1] == self.entry_point:
                self.add("reference_access", node, f"class {node.name} subclasses the reference {name}")
        for item in node.body:
            if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)):
                self.functions[f"{node.name}.{item.name}"] = item
        self._func_depth += 1
        self.generic_visit(node)
        self._func_depth -= 1

    # -- statements ---------------------------------------------------------------------------
    def visit_Try(self, node: ast.AST) -> None:
        around_imports = not self._func_depth and all(
            isinstance(s, (ast.Import, ast.ImportFrom)) for s in getattr(node, "body", []))
        self.add("try_except", node, "try/except around imports (a fallback path)" if around_imports
                 else "try/except can hide a failing kernel behind a fallback")
        self.generic_visit(node)

    visit_TryStar = visit_Try  # type: ignore[assignment]

    def visit_Global(self, node: ast.Global) -> None:
        self.add("output_cache", node, f"global {', '.join(node.names)}: state kept across calls")

    visit_Nonlocal = visit_Global  # type: ignore[assignment]

    def _check_target(self, target: ast.AST, node: ast.AST) -> None:
        if isinstance(target, (ast.Tuple, ast.List)):
            for elt in target.elts:
                self._check_target(elt, node)
            return
        base = target
        while isinstance(base, ast.Subscript):
            base = base.value
        if isinstance(base, ast.Attribute):
            root = _root_name(base)
            dotted = _dotted(base) or base.attr
            if root in self.module_aliases or root in ("torch", "triton", "time", "math", "numpy", "np"):
                if "allow_tf32" in dotted or "backends" in dotted or "allow_fp16" in dotted or "allow_bf16" in dotted:
                    self.add("global_state", node, f"assigns {dotted}")
                else:
                    self.add("timer_patch", node, f"assigns library attribute {dotted}")
            elif base.attr in _INTROSPECTION_ATTRS or base.attr.startswith("__") and base.attr != "__init__":
                self.add("introspection", node, f"assigns {dotted}")
        if isinstance(target, ast.Subscript) and isinstance(base, ast.Name) and base.id in self.module_mutables:
            self.add("output_cache", node, f"writes into module-level container {base.id}")
        if (self._func_depth and isinstance(base, ast.Attribute) and isinstance(base.value, ast.Name)
                and base.value.id in self.top_level):
            self.add("output_cache", node, f"stores {base.value.id}.{base.attr} at run time: state kept across calls")

    def _module_binding(self, target: ast.AST, value: ast.AST | None) -> None:
        """A module-level assignment of ``value`` to ``target``: which names it binds, and how."""
        for n in ast.walk(target):
            if isinstance(n, ast.Name):
                self.module_globals.add(n.id)
        if isinstance(target, ast.Name) and value is not None:
            if _is_mutable_literal(value):
                self.module_mutables.add(target.id)
            if _is_constant(value):
                self.module_constants.add(target.id)

    def visit_Assign(self, node: ast.Assign) -> None:
        if self._func_depth == 0:
            for t in node.targets:
                self._module_binding(t, node.value)
        for t in node.targets:
            self._check_target(t, node)
        self.generic_visit(node)

    def visit_AugAssign(self, node: ast.AugAssign) -> None:
        self._check_target(node.target, node)
        self.generic_visit(node)

    def visit_AnnAssign(self, node: ast.AnnAssign) -> None:
        if self._func_depth == 0:
            self._module_binding(node.target, node.value)
        self._check_target(node.target, node)
        self.generic_visit(node)

    # -- expressions --------------------------------------------------------------------------
    def visit_Constant(self, node: ast.Constant) -> None:
        if isinstance(node.value, str):
            low = node.value.lower()
            hit = next((t for t in _WAIT_TOKENS if t in low), None)
            if hit:
                self.add("idle_wait", node, f"a string naming {hit!r} (inline PTX reading a clock or sleeping)")

    def visit_Name(self, node: ast.Name) -> None:
        if node.id in _INTROSPECTION_NAMES:
            self.add("introspection", node, f"uses {node.id}")
        self.generic_visit(node)

    def visit_Attribute(self, node: ast.Attribute) -> None:
        dotted = _dotted(node) or node.attr
        if node.attr == "handle":  # a Triton value's payload in the interpreter (an IR value compiled)
            self.add("kernel_python", node, f"reaches {dotted}: the interpreter's internals of a Triton value")
        if node.attr in _INTROSPECTION_ATTRS:
            self.add("introspection", node, f"accesses {dotted}")
        if node.attr in _STREAM_ATTRS and ("cuda" in dotted or dotted.startswith("torch")):
            self.add("cuda_stream", node, f"uses {dotted}")
        self.generic_visit(node)

    def visit_Call(self, node: ast.Call) -> None:
        fname = _dotted(node.func) or ""
        if fname == "super" and node.args:
            self.add("introspection", node, "super(...) with arguments (reaches base-class internals)")
        last = fname.split(".")[-1]
        root = fname.split(".")[0]
        if last in ("setattr",):
            target = node.args[0] if node.args else None
            if not (isinstance(target, ast.Name) and target.id == "self"):
                self.add("timer_patch", node, "setattr on an object other than self")
        if last in _GLOBAL_STATE_CALLS and (root in self.module_aliases or root in ("torch", "np", "numpy", "random")):
            self.add("global_state", node, f"calls {fname}")
        if last in _TENSOR_SUBCLASS_CALLS:
            self.add("tensor_subclass", node, f"calls {fname}")
        if fname == "open" or (last in _FILE_CALLS and root in ("torch", "np", "numpy") and last != "load_inline"):
            self.add("file_access", node, f"calls {fname}")
        if last in ("fork", "system", "popen", "spawnv", "Thread", "Process", "Pool"):
            self.add("threads", node, f"calls {fname}")
        self.generic_visit(node)


def _is_mutable_literal(value: ast.AST) -> bool:
    if isinstance(value, (ast.Dict, ast.List, ast.Set, ast.DictComp, ast.ListComp, ast.SetComp)):
        return True
    if isinstance(value, ast.Call):
        name = _dotted(value.func) or ""
        return name.split(".")[-1] in _MUTABLE_FACTORIES
    return False


def _forward_reaches_kernel(checker: _Checker, cls_name: str) -> bool:
    """Follow calls from ``<cls>.forward`` through module functions and ``self.<method>`` calls.

    A reachable function that mentions a kernel's name (launch ``k[grid](...)``, or passing it to a
    launcher), or launches ``self.<attr>[grid](...)`` (a kernel built and stored on the module),
    counts as reaching it. Conservative on purpose: the runtime launch records decide.
    """
    start = checker.functions.get(f"{cls_name}.forward")
    if start is None:
        return False
    seen: set[int] = set()
    stack = [start]
    while stack:
        fn = stack.pop()
        if id(fn) in seen:
            continue
        seen.add(id(fn))
        for node in ast.walk(fn):
            if isinstance(node, ast.Name) and node.id in checker.kernels:
                return True
            if isinstance(node, ast.Attribute) and node.attr in checker.kernels:
                return True  # self._kernel / Cls.kernel
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Subscript) \
                    and isinstance(node.func.value, ast.Attribute) and _root_name(node.func.value) == "self":
                return True  # self.<stored kernel>[grid](...): launch syntax on a kernel kept on the module
            if isinstance(node, ast.Name) and node.id in checker.functions:
                stack.append(checker.functions[node.id])
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "self":
                for key, func in checker.functions.items():
                    if key.endswith(f".{node.attr}"):
                        stack.append(func)
            if isinstance(node, ast.Name) and node.id in checker.classes:
                for key, func in checker.functions.items():
                    if key.startswith(f"{node.id}."):
                        stack.append(func)
    return False


_META_ATTRS = {"shape", "size", "numel", "dim", "ndim", "dtype", "device", "stride", "is_contiguous",
               "element_size", "is_cuda", "layout", "requires_grad", "nelement"}


def _tensor_use(node: ast.AST, tensorish: set[str]) -> bool:
    """True when ``node`` may produce or hold a tensor: it uses a tensor-valued name other than through
    metadata (``x.shape``, ``x.size(1)``, ...) or calls into torch."""
    if isinstance(node, ast.Attribute) and node.attr in _META_ATTRS:
        return False
    if isinstance(node, ast.Name):
        return node.id in tensorish
    if isinstance(node, ast.Call):
        fname = _dotted(node.func) or ""
        if fname.split(".")[0] in ("torch", "F", "nn") and fname.split(".")[-1] not in _META_ATTRS:
            return True
    return any(_tensor_use(child, tensorish) for child in ast.iter_child_nodes(node))


def _self_state_in_forward(checker: _Checker, cls_name: str) -> list[Finding]:
    """``self.x = <tensor>`` / ``self.x[...] = <tensor>`` inside forward: results carried across calls.

    Memoising plain launch configuration (ints derived from shapes) is fine; storing anything that
    can hold a tensor (an input, an output, a torch allocation) is a cache.
    """
    out: list[Finding] = []
    fn = checker.functions.get(f"{cls_name}.forward")
    if fn is None:
        return out
    tensorish = {a.arg for a in fn.args.args[1:]} | {a.arg for a in fn.args.kwonlyargs}
    if fn.args.vararg:
        tensorish.add(fn.args.vararg.arg)
    assigns = [n for n in ast.walk(fn) if isinstance(n, (ast.Assign, ast.AugAssign, ast.AnnAssign))]
    for _ in range(3):  # propagate through local assignments to a fixed point
        for node in assigns:
            value = node.value
            if value is None or not _tensor_use(value, tensorish):
                continue
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for t in targets:
                for name in ast.walk(t):
                    if isinstance(name, ast.Name):
                        tensorish.add(name.id)
    for node in assigns:
        targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        for t in targets:
            base = t
            while isinstance(base, ast.Subscript):
                base = base.value
            if isinstance(base, ast.Attribute) and isinstance(base.value, ast.Name) and base.value.id == "self" \
                    and node.value is not None and _tensor_use(node.value, tensorish):
                out.append(Finding("output_cache", f"forward stores a tensor on self.{base.attr} across calls",
                                   node.lineno))
    return out


#: CPython 3.11 keeps the AST constructor's recursion depth in interpreter-wide state: two threads
#: building ASTs at once (a garbage collection mid-parse switches threads) can raise "SystemError:
#: AST constructor recursion depth mismatch" (python/cpython#106905). LocalGrader checks several
#: candidates on threads, so parsing is serialised (a parse takes about a millisecond).
_PARSE_LOCK = threading.Lock()


def parse_source(source: str) -> ast.Module:
    """``ast.parse``, safe to call from several threads at once."""
    with _PARSE_LOCK:
        return ast.parse(source)


def check_source(source: str, entry_point: str = "Model") -> StaticReport:
    """Run every static check on a candidate's source."""
    report = StaticReport()
    try:
        tree = parse_source(source)
    except SyntaxError as exc:
        report.syntax_error = f"SyntaxError: {exc.msg} (line {exc.lineno})"
        return report
    top_level = {n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))}
    checker = _Checker(entry_point, top_level)
    checker.visit(tree)
    cls_name = f"{entry_point}New"
    report.kernels = sorted(checker.kernels)
    report.findings = list(checker.findings)
    if cls_name not in checker.classes:
        report.missing_class = f"no class {cls_name} is defined"
        return report
    if not checker.kernels:
        report.findings.append(Finding("no_triton_kernel", "no @triton.jit kernel is defined", 0))
    elif not _forward_reaches_kernel(checker, cls_name):
        forward = checker.functions.get(f"{cls_name}.forward")
        report.findings.append(Finding("forward_no_launch", f"{cls_name}.forward never reaches a Triton kernel",
                                       getattr(forward, "lineno", 0)))
    for node in ast.walk(checker.classes[cls_name]):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "forward" \
                and isinstance(node.func.value, ast.Call) and _dotted(node.func.value.func) == "super":
            report.findings.append(Finding("reference_access", "calls super().forward()", node.lineno))
    report.findings.extend(_self_state_in_forward(checker, cls_name))
    report.findings.extend(_python_in_kernels(checker))
    return report


#: Python builtins a Triton kernel body may call (the compiler handles them on constexprs).
_KERNEL_BUILTINS = frozenset({"range", "min", "max", "len", "print", "int", "float", "bool", "isinstance", "abs",
                              "zip", "enumerate", "tuple", "list", "divmod", "round", "type", "str"})
#: Module roots whose functions a kernel body may call: Triton's (``tl.*``, ``libdevice``...) and
#: ``math`` on constexpr scalars.
_KERNEL_MODULES = frozenset({"triton", "math"})


def _is_constant(value: ast.AST) -> bool:
    """A literal number, string or bool, a tuple of them, or ``tl.constexpr(<that>)``."""
    if isinstance(value, ast.Constant):
        return True
    if isinstance(value, ast.UnaryOp) and isinstance(value.operand, ast.Constant):
        return True
    if isinstance(value, ast.Tuple):
        return all(_is_constant(v) for v in value.elts)
    if isinstance(value, ast.Call) and (_dotted(value.func) or "").split(".")[-1] == "constexpr" and value.args:
        return _is_constant(value.args[0])
    return False


def _python_in_kernels(checker: _Checker) -> list[Finding]:
    """Calls in ``@triton.jit`` bodies that only the CPU interpreter would run: on a GPU a kernel
    can call Triton's language, other ``@triton.jit`` functions and a few builtins; the interpreter
    runs the body as Python, so anything else (a NumPy product on the lanes' arrays, a module-level
    helper) would compute on the host where the GPU compiler refuses. Method calls on the kernel's
    own values (``x.to(...)``) and calls of its parameters (``@triton.jit`` callables passed as
    constexprs; the launch checks them at run time) are the kernel's."""
    out: list[Finding] = []
    for name in sorted(checker.kernels):
        fn = checker.functions.get(name)
        if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        local = {a.arg for a in fn.args.args + fn.args.kwonlyargs + fn.args.posonlyargs}
        for node in ast.walk(fn):
            if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                local.add(node.id)
        for node in ast.walk(fn):
            if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load) and node.id not in local \
                    and node.id not in checker.kernels and node.id not in checker.module_constants \
                    and node.id not in checker.module_aliases and node.id not in _KERNEL_BUILTINS \
                    and (node.id in checker.top_level or node.id in checker.module_globals):
                # a GPU kernel may read only constexpr globals, Triton modules and @triton.jit functions;
                # the interpreter would run any object's operators (``OBJ @ acc``) on the host
                out.append(Finding("kernel_python", f"kernel {name} uses the module-level object {node.id}, which "
                                                    "is not a constant, a Triton module or a @triton.jit function",
                                   node.lineno))
                continue
            if isinstance(node, ast.Attribute) and node.attr.startswith("__"):  # (``.handle``: everywhere)
                out.append(Finding("kernel_python", f"kernel {name} reaches .{node.attr}, not Triton",
                                   node.lineno))
                continue
            if not isinstance(node, ast.Call):
                continue
            root = _root_name(node.func)
            if root is None or root in local or root in checker.kernels:
                continue
            if isinstance(node.func, ast.Name) and root in _KERNEL_BUILTINS:
                continue
            if checker.module_aliases.get(root) in _KERNEL_MODULES:
                continue
            what = _dotted(node.func) or root
            out.append(Finding("kernel_python", f"kernel {name} calls {what}(), which is not Triton", node.lineno))
    return out
