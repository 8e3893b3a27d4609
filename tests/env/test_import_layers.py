"""The grader package's shape, read from its source (ast: nothing is imported).

* No import cycle among ``drkernel.env`` modules. An edge is any ``import`` or ``from ... import``
  of a ``drkernel.env`` module that can run: at module level or inside a function (not under
  ``if TYPE_CHECKING:``, which only a type checker reads: the rooms' stages name the evaluation in
  their annotations that way). ``from pkg import name`` is an edge to ``pkg.name`` when that is a module,
  else to ``pkg``; importing a module also runs its packages' ``__init__``, so those are edges too.
* Imports one way between the rooms: a module imports only its own room and the rooms below it
  (:data:`LAYERS`, lowest first), except the few lazy imports in :data:`UPWARD`, each with why.
* No file in ``drkernel/env`` over :data:`MAX_LINES` lines.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "drkernel" / "env"
MAX_LINES = 800

#: The grader's layers, lowest first: the contracts every room shares, the five rooms' own modules,
#: the rooms' stages of an evaluation, and the assembly on top.
LAYERS = (
    ("contracts", ("config", "protocol", "result", "faults", "device")),
    ("guards", ("guards",)),
    ("judge", ("judge",)),
    ("measure", ("measure",)),
    ("tasks", ("tasks",)),
    ("process", ("process",)),
    ("stages", ("guards.stages", "judge.stages", "measure.stages", "tasks.stages", "process.stages")),
    ("assembly", ("", "evaluation", "grader", "conformance")),
)

#: Imports against the layers, all inside a function, each with its reason.
UPWARD = {
    ("config", "judge.precision"): "EvalConfig.validate checks a policy name with the judge's own lookup",
    ("measure.timing", "tasks.task"): "the worker scales timed inputs with the grader's scale_floats, so both "
                                      "sides build bit-identical tensors",
}


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def modules() -> dict[str, Path]:
    return {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def _resolve(name: str, known: dict[str, Path]) -> str | None:
    """The most specific known module that ``name`` names (``a.b.C`` -> ``a.b``)."""
    while name:
        if name in known:
            return name
        name = name.rpartition(".")[0]
    return None


def _with_packages(name: str, known: dict[str, Path]) -> set[str]:
    """``name`` and every package above it inside the known set (their ``__init__`` runs first)."""
    out = set()
    while name:
        if name in known:
            out.add(name)
        name = name.rpartition(".")[0]
    return out


def _is_type_checking(test: ast.expr) -> bool:
    """``if TYPE_CHECKING:`` or ``if typing.TYPE_CHECKING:``."""
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def imports_of(name: str, source: str, is_package: bool, known: dict[str, Path]) -> dict[str, int]:
    """``{imported drkernel.env module: first line}`` for one module's source."""
    package = name if is_package else name.rpartition(".")[0]
    found: dict[str, int] = {}

    def add(target: str | None, line: int) -> None:
        if target is None:
            return
        for t in _with_packages(target, known):
            if t != name and not name.startswith(t + "."):  # (a module's own packages are already running)
                found.setdefault(t, line)

    tree = ast.parse(source)
    type_only = {id(n) for block in ast.walk(tree) if isinstance(block, ast.If) and _is_type_checking(block.test)
                 for stmt in block.body for n in ast.walk(stmt)}
    for node in ast.walk(tree):
        if id(node) in type_only:
            continue
        if isinstance(node, ast.Import):
            for alias in node.names:
                add(_resolve(alias.name, known), node.lineno)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[:len(base) - (node.level - 1)]
                source = ".".join(base + ([node.module] if node.module else []))
            else:
                source = node.module or ""
            for alias in node.names:
                sub = f"{source}.{alias.name}"
                add(sub if sub in known else _resolve(source, known), node.lineno)
    return found


def import_graph() -> dict[str, dict[str, int]]:
    known = modules()
    return {name: imports_of(name, path.read_text(encoding="utf-8"), path.name == "__init__.py", known)
            for name, path in known.items()}


def find_cycles(graph: dict[str, dict[str, int]]) -> list[tuple[list[str], list[str]]]:
    """Per strongly connected component of more than one module (Tarjan): its shortest cycle through
    its first module, as a path ``[a, b, ..., a]``, and the component's modules."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []

    def visit(v: str) -> None:  # (the graph is a few dozen modules: recursion is fine)
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph.get(v, {}):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                components.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    cycles = []
    for component in components:
        members = set(component)
        start = component[0]
        # the shortest way back to start inside the component (breadth first)
        paths = {start: [start]}
        frontier = [start]
        cycle = None
        while frontier and cycle is None:
            nxt = []
            for v in frontier:
                for w in sorted(graph[v]):
                    if w == start:
                        cycle = paths[v] + [start]
                        break
                    if w in members and w not in paths:
                        paths[w] = paths[v] + [w]
                        nxt.append(w)
                if cycle:
                    break
            frontier = nxt
        cycles.append((cycle or component, component))
    return cycles


def describe(cycle: list[str], component: list[str], graph: dict[str, dict[str, int]]) -> str:
    short = lambda m: m.removeprefix("drkernel.env.")  # noqa: E731
    steps = [f"{short(a)} (line {graph[a][b]}) -> {short(b)}" for a, b in zip(cycle, cycle[1:])]
    return f"  {';  '.join(steps)}\n    (all of them import each other, directly or not: {', '.join(map(short, component))})"


def test_the_resolver_sees_every_kind_of_import():
    known = dict.fromkeys(["drkernel.env", "drkernel.env.a", "drkernel.env.p", "drkernel.env.p.b",
                           "drkernel.env.p.c"], Path())
    source = ("import drkernel.env.a\n"
              "def f():\n    from drkernel.env.p import b\n"
              "def g():\n    from .. import a\n"
              "if TYPE_CHECKING:\n    from drkernel.env.p import c\n    import drkernel.env\n")
    # (its own packages drkernel.env and drkernel.env.p are not edges: they are running already; a
    # TYPE_CHECKING import never runs)
    assert imports_of("drkernel.env.p.c", source, False, known) == {"drkernel.env.a": 1, "drkernel.env.p.b": 3}
    assert imports_of("drkernel.env.a", "if typing.TYPE_CHECKING:\n    import drkernel.env.p.b\n", False, known) == {}
    assert find_cycles({"a": {"b": 1}, "b": {"c": 2}, "c": {"a": 3}, "d": {"a": 4}}) == [(["a", "b", "c", "a"], ["a", "b", "c"])]


def test_every_module_has_one_layer():
    names = [m.removeprefix("drkernel.env").removeprefix(".") for m in modules()]
    assert {LAYERS[layer_of("drkernel.env." + n if n else "drkernel.env")][0] for n in names} == {name for name, _ in LAYERS}
    assert LAYERS[layer_of("drkernel.env.judge.stages")][0] == "stages"
    assert LAYERS[layer_of("drkernel.env.judge.compare")][0] == "judge"


def test_no_import_cycle_among_grader_modules():
    graph = import_graph()
    cycles = find_cycles(graph)
    assert not cycles, "import cycles among drkernel.env modules (import one way: move the shared piece " \
                       "down to a module both sides can import):\n" + "\n".join(describe(c, m, graph) for c, m in cycles)



def layer_of(module: str) -> int:
    """The index in :data:`LAYERS` of a ``drkernel.env`` module (its most specific match)."""
    rel = module.removeprefix("drkernel.env").removeprefix(".")
    best = None
    for k, (_, prefixes) in enumerate(LAYERS):
        for prefix in prefixes:
            if rel == prefix or (prefix and rel.startswith(prefix + ".")):
                if best is None or len(prefix) > best[1]:
                    best = (k, len(prefix))
    assert best is not None, f"{module} is in no layer: add it to LAYERS"
    return best[0]


def test_imports_go_one_way_between_the_rooms():
    graph = import_graph()
    short = lambda m: m.removeprefix("drkernel.env.")  # noqa: E731

    def allowed(a: str, b: str) -> bool:  # (a listed import also runs its package's __init__)
        return any(x == short(a) and (t == short(b) or t.startswith(short(b) + ".")) for x, t in UPWARD)

    upward = [f"  {short(a)} (line {line}, layer {LAYERS[layer_of(a)][0]}) imports {short(b)} "
              f"(layer {LAYERS[layer_of(b)][0]})"
              for a, targets in sorted(graph.items()) for b, line in sorted(targets.items())
              if layer_of(b) > layer_of(a) and not allowed(a, b)]
    assert not upward, "imports up the layers (move the shared piece down, or the importer up):\n" + "\n".join(upward)
    stale = [pair for pair in UPWARD if pair[1] not in {short(b) for b in graph.get("drkernel.env." + pair[0], {})}]
    assert not stale, f"UPWARD lists imports that are gone: {stale}"


def test_no_grader_file_over_the_line_limit():
    long = {str(p.relative_to(ROOT)): n for p in PACKAGE.rglob("*.py")
            if (n := len(p.read_text(encoding="utf-8").splitlines())) > MAX_LINES}
    assert not long, f"files over {MAX_LINES} lines (split by concern): {long}"
