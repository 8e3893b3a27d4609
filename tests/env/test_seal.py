"""The seal over the harness's own namespaces (drkernel.env.guards.seal): identity checks that end the
process with EXIT_TAMPERED on any rebinding, in a subprocess each (the check calls os._exit)."""

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from drkernel.env.guards.seal import EXIT_TAMPERED

ROOT = Path(__file__).resolve().parents[2]

RUNNER = textwrap.dedent('''
    import sys, types
    pkg = types.ModuleType("sealtest"); sub = types.ModuleType("sealtest.mod")
    sys.modules["sealtest"], sys.modules["sealtest.mod"] = pkg, sub
    class Worker:
        def keep(self, call):
            return call
    def helper():
        return 1
    Worker.__module__ = "sealtest.mod"
    sub.Worker, sub.helper, pkg.mod = Worker, helper, sub
    depth = [0]
    def guard(flag=True):
        return lambda: flag
    g = guard()
    from drkernel.env.guards.seal import make_seal
    class Made:  # a harness class made in a function (not a module attribute)
        def cost(self):
            return 1
    check = make_seal(prefixes=("sealtest",), cells=g.__closure__, zero=[("a stack", lambda: depth[0])],
                      classes=[Made])
    case = sys.argv[1]
    if case == "new_submodule":
        pkg.extra = types.ModuleType("sealtest.extra")
    elif case == "module_rebind":
        sub.helper = lambda: 2
    elif case == "class_rebind":
        setattr(Worker, "keep", lambda self, call: None)
    elif case == "class_added":
        Worker.ask = lambda self: None
    elif case == "sys_modules":
        sys.modules["sealtest.mod"] = types.ModuleType("sealtest.mod")
    elif case == "cell":
        g.__closure__[0].cell_contents = False
    elif case == "builtins":
        import builtins
        builtins.len = lambda x: 0
    elif case == "stack":
        depth[0] = 1
    elif case == "module_class":
        class Evil(types.ModuleType):
            pass
        sub.__class__ = Evil
    elif case == "odd_key":
        class K(str):
            pass
        sub.__dict__[K("x")] = types.ModuleType("x")
    elif case == "odd_sys_key":
        sys.modules[1] = sub
    elif case == "made_class":
        Made.cost = lambda self: 0
    elif case == "restored":
        original = Worker.keep
        Worker.keep = lambda self, call: None
        Worker.keep = original
    check("the test")
    print("clean")
''')


@pytest.mark.parametrize("case,tampered", [("nothing", False), ("new_submodule", False), ("restored", False),
                                           ("module_rebind", True), ("class_rebind", True), ("class_added", True),
                                           ("sys_modules", True), ("cell", True), ("builtins", True), ("made_class", True),
                                           ("module_class", True), ("odd_key", True), ("odd_sys_key", True),
                                           ("stack", True)])
def test_any_rebinding_of_the_harness_ends_the_process(tmp_path, case, tampered):
    runner = tmp_path / "runner.py"
    runner.write_text(RUNNER)
    out = subprocess.run([sys.executable, str(runner), case], capture_output=True, text=True, timeout=120,
                         env={**os.environ, "PYTHONPATH": str(ROOT)})
    if tampered:
        assert out.returncode == EXIT_TAMPERED, (out.returncode, out.stdout, out.stderr[-2000:])
        assert "harness tampered" in out.stderr and "the test" in out.stderr
    else:
        assert out.returncode == 0 and "clean" in out.stdout, (out.returncode, out.stderr[-2000:])
