"""The worker's audit (drkernel.env.guards.audit) and confinement (drkernel.env.process.confine), each in a
subprocess of its own: audit hooks cannot be removed and Landlock cannot be lifted, so they must
never be installed in the test process."""

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

# Runs the "candidate" file exactly as the worker does: imported by drkernel code (trusted), with
# the audit enforcing. Prints the candidate's `results` and the ledger as JSON.
RUNNER = textwrap.dedent('''
    import json, sys
    import torch
    from drkernel.env.guards.audit import Auditor, StateGuard
    from drkernel.env.process.loading import import_file  # trusted code imports the candidate, as in the worker
    a = Auditor(); a.install(torch)
    guard = StateGuard(torch); guard.snapshot()
    a.enforcing = True
    m = import_file(sys.argv[1])
    print(json.dumps({"results": m.results, "records": a.records(), "changes": guard.changes()}))
''')

PROBE = textwrap.dedent('''
    import torch
    results = {}
    def attempt(name, fn):
        try:
            fn()
            results[name] = "allowed"
        except Exception as e:
            results[name] = type(e).__name__
    sysmod = torch.sys
    attempt("getframe", lambda: sysmod._getframe())
    attempt("open", lambda: open("/etc/hostname").read())
    attempt("gc_objects", lambda: sysmod.modules["gc"].get_objects())
    attempt("thread", lambda: sysmod.modules["_thread"].start_new_thread(lambda: None, ()))
    attempt("threading", lambda: sysmod.modules["threading"].Thread(target=lambda: None).start())
    attempt("import_ftplib", lambda: __import__("ftplib"))
    attempt("code_object", lambda: attempt.__code__)
    attempt("exec", lambda: exec("1"))
    def tb():
        try:
            1 / 0
        except ZeroDivisionError as e:
            return e.__traceback__.tb_frame
    attempt("tb_frame", tb)
    attempt("pop_mode", lambda: torch.utils._python_dispatch._pop_mode())
    attempt("profiler_state", lambda: torch.autograd._profiler_enabled())
    attempt("library", lambda: torch.library.Library("aten", "IMPL"))
    attempt("settrace", lambda: sysmod.settrace(None))
    added = []
    attempt("addaudithook", lambda: sysmod.addaudithook(lambda *a: added.append(1)))
    results["hook_added"] = bool(added) or (open and False)
    attempt("numpy_copy", lambda: torch.ones(3).numpy())
    # automatic collection back on (finalisers outside the calls' windows); gc reached through torch
    attempt("gc_enable", lambda: torch.cuda.graphs.gc.enable())
    attempt("gc_threshold", lambda: torch.cuda.graphs.gc.set_threshold(1))
    # the CUDA runtime's bindings (cudaHostRegister) and the CUDA profiler's switches
    attempt("cudart", lambda: torch.cuda.cudart())
    attempt("cuda_profiler", lambda: torch.cuda.profiler.start())
    # raw memory behind an integer: ctypes' cast and NumPy's ctypes bridge (no audit event of their own)
    import numpy
    ct = numpy.ctypeslib.ctypes
    attempt("ctypes_cast", lambda: ct.cast(torch.ones(2).data_ptr(), ct.POINTER(ct.c_float)))
    attempt("ctypeslib", lambda: numpy.ctypeslib.as_array(ct.pointer(ct.c_float(1.0)), shape=(1,)))
    # reaching a guard's closure yields only sealed callables, never the original thread starter
    cell = sysmod.modules["_thread"].start_new_thread.__closure__
    results["closure"] = sorted(f"{type(c.cell_contents).__name__}:{getattr(c.cell_contents, '__name__', '')}"
                                for c in cell)
    import dataclasses, collections
    @dataclasses.dataclass
    class D:
        x: int = 1
    attempt("dataclass", lambda: D())
    attempt("namedtuple", lambda: collections.namedtuple("P", "a b")(1, 2))
    attempt("math", lambda: __import__("math").sqrt(4.0))
''')


def _run(code: str, tmp_path: Path, candidate: str) -> dict:
    cand = tmp_path / "cand.py"
    cand.write_text(candidate)
    runner = tmp_path / "runner.py"
    runner.write_text(code)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    out = subprocess.run([sys.executable, str(runner), str(cand)], capture_output=True, text=True, env=env,
                         timeout=300, cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_operations_the_candidate_makes_are_refused_and_recorded(tmp_path):
    res = _run(RUNNER, tmp_path, PROBE)
    r = res["results"]
    for name in ("getframe", "open", "gc_objects", "thread", "threading", "import_ftplib", "code_object",
                 "exec", "tb_frame", "pop_mode", "library", "settrace", "profiler_state", "gc_enable", "gc_threshold",
                 "cudart", "cuda_profiler", "ctypes_cast", "ctypeslib"):
        assert r[name] == "PermissionError", (name, r)
    # what kernels legitimately use still works
    for name in ("dataclass", "namedtuple", "math", "numpy_copy"):
        assert r[name] == "allowed", (name, r)
    assert not r["hook_added"]  # CPython drops a hook an existing one refuses
    assert not any("start_new" in c for c in r["closure"]), r["closure"]  # only sealed callables, names, _getframe
    records = res["records"]
    assert all(hack_id in ("forbidden_operation", "host_compute") for hack_id, _ in records)
    text = " ".join(detail for _, detail in records)
    for needle in ("sys._getframe", "open('/etc/hostname')", "gc.get_objects", "starting a thread", "import 'ftplib'",
                   "__code__", "tb_frame", "_pop_mode", "Library.__init__", "sys.settrace", "addaudithook", "_profiler_enabled",
                   "Tensor.numpy()", "gc.enable", "gc.set_threshold", "torch.cuda.cudart", "torch.cuda.start", "ctypes/numpy.ctypeslib cast()",
                   "ctypes/numpy.ctypeslib as_array()"):
        assert needle in text, (needle, records)
    assert all("cand.py:" in detail for _, detail in records if "hook" not in detail), [r for r in records if "cand.py:" not in r[1]]


def test_the_ledger_only_grows():
    from drkernel.env.guards.audit import sealed_ledger

    send = sealed_ledger()
    send(("add", ("a", "1")))
    for hostile in (None, ("clear",), ("add",), 5):
        send(hostile)  # ignored, never fatal
    assert send(("read",)) == [("a", "1")]
    copy = send(("read",))
    copy.clear()
    assert send(("read",)) == [("a", "1")]


def test_state_changes_are_reported_by_name(tmp_path):
    res = _run(RUNNER, tmp_path, textwrap.dedent('''
        import torch
        results = {}
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.nn.modules.module.register_module_forward_hook(lambda m, i, o: o)
        torch.Tensor.clone = lambda self: self
        torch.set_default_dtype(torch.float64)
        torch.set_default_dtype(torch.float32)
        torch.cuda.graphs.gc.disable()  # (the worker runs with it off: then switching it on shows)
    '''))
    changes = " | ".join(res["changes"])
    assert "gc.enabled: True -> False" in changes
    assert "cuda.matmul.allow_tf32: False -> True" in changes
    assert "_global_forward_hooks" in changes
    assert "torch.Tensor.clone was added" in changes


def test_a_quiet_candidate_changes_nothing(tmp_path):
    res = _run(RUNNER, tmp_path, textwrap.dedent('''
        import math
        import torch
        import triton
        import triton.language as tl
        results = {"y": float(torch.relu(torch.arange(-2.0, 2.0)).sum())}
    '''))
    assert res["records"] == [] and res["changes"] == [], res


CONFINE = textwrap.dedent('''
    import json, os, socket, sys
    import torch
    from drkernel.env.process.confine import confine, landlock_abi, private_environment
    wd = sys.argv[2]
    os.makedirs(wd, exist_ok=True)
    os.environ.update(private_environment(wd))
    report = confine(wd)
    out = {"report": report}
    def attempt(name, fn):
        try:
            fn()
            out[name] = "allowed"
        except Exception as e:
            out[name] = type(e).__name__
    attempt("write_workdir", lambda: open(os.path.join(wd, "x"), "w").write("1"))
    attempt("write_outside", lambda: open(os.path.join(sys.argv[3], "y"), "w").write("1"))
    attempt("read_solutions", lambda: open(sys.argv[4]).read())
    attempt("read_package", lambda: open(sys.argv[5]).read())
    attempt("tcp", lambda: socket.create_connection(("127.0.0.1", 9), timeout=1))
    attempt("signal_parent", lambda: os.kill(os.getppid(), 0))
    attempt("torch", lambda: torch.ones(2).sum().item())
    print(json.dumps(out))
''')


@pytest.mark.skipif(sys.platform != "linux", reason="Landlock is Linux-only")
def test_confinement_keeps_writes_in_the_work_directory(tmp_path):
    from drkernel.env.process.confine import landlock_abi

    if landlock_abi() < 1:
        pytest.skip("this kernel has no Landlock")
    runner = tmp_path / "confine.py"
    runner.write_text(CONFINE)
    outside = tmp_path / "outside"
    outside.mkdir()
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    args = [sys.executable, str(runner), "x", str(tmp_path / "wd"), str(outside),
            str(ROOT / "envs/single_ops/solutions/01_relu.py"), str(ROOT / "drkernel/__init__.py")]
    proc = subprocess.run(args, capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["report"]["writes"] == "work directory only", out
    assert out["write_workdir"] == "allowed" and out["torch"] == "allowed" and out["read_package"] == "allowed"
    assert out["write_outside"] == "PermissionError"
    assert out["read_solutions"] == "PermissionError"  # the bundled solutions are not in reach
    if landlock_abi() >= 4:
        assert out["tcp"] == "PermissionError"
    if landlock_abi() >= 6:
        assert out["signal_parent"] == "PermissionError"


def test_the_per_call_fingerprint_raises_no_audit_event_and_compares_by_identity(tmp_path):
    """The cheap fingerprint runs after every timed call, inside the GPU's exclusive hold: it must not
    raise audit events (``id()`` is one; the audit hook then ran once per watched class attribute,
    ~300 times a call), and a binding replaced by an object that claims to equal the original, or
    that reuses the original's id, is still a change."""
    res = _run(textwrap.dedent('''
        import json, sys
        import torch
        from drkernel.env.guards.audit import Auditor, StateGuard
        a = Auditor(); a.install(torch)
        guard = StateGuard(torch); guard.snapshot()
        events = []
        sys.addaudithook(lambda e, args: events.append(e))
        a.enforcing = True
        guard.changes(full=False); guard.changes(full=True)
        a.enforcing = False
        quiet = sorted(set(events))

        class Liar:
            def __eq__(self, other): return True
            def __ne__(self, other): return False
            __hash__ = object.__hash__
        assert "backward" in torch.Tensor.__dict__
        torch.Tensor.backward = Liar()
        sys.excepthook = Liar()
        changes = guard.changes(full=False)
        print(json.dumps({"quiet": quiet, "changes": changes}))
    '''), tmp_path, "")
    assert "builtins.id" not in res["quiet"], res["quiet"]
    changes = " | ".join(res["changes"])
    assert "torch.Tensor.backward was rebound" in changes and "sys.excepthook" in changes, changes


FAKE_CUDART = """
import types
fake = types.ModuleType("_cudart")
fake.cudaHostRegister = lambda ptr, size, flags: 0
fake.cudaProfilerStop = lambda: 0
torch._C._cudart = fake
a = Auditor()"""


def test_the_cuda_runtime_bindings_are_refused(tmp_path):
    """On a CUDA build ``torch._C._cudart`` holds the runtime's bindings (``cudaHostRegister`` maps host
    memory for kernels to write): every function is refused to the candidate. A stand-in module plays
    the bindings on a CPU build."""
    runner = RUNNER.replace("a = Auditor()", FAKE_CUDART.strip().replace("\n", "; "))
    res = _run(runner, tmp_path, textwrap.dedent("""
        import torch
        results = {}
        for name, fn in (("register", lambda: torch._C._cudart.cudaHostRegister(0, 4096, 0)),
                         ("stop", lambda: torch._C._cudart.cudaProfilerStop())):
            try:
                results[name] = fn()
            except Exception as e:
                results[name] = type(e).__name__
    """))
    assert res["results"] == {"register": "PermissionError", "stop": "PermissionError"}, res
    text = " ".join(detail for _, detail in res["records"])
    assert "cudaHostRegister" in text and "cudaProfilerStop" in text, res["records"]


def test_the_fingerprint_check_runs_none_of_the_candidates_code():
    """StateGuard.changes reads torch's flags through C getters bound before the candidate loads and
    sys/gc/threading through their real namespaces: a candidate that replaces the objects torch's
    Python properties read (``torch.backends.cuda.matmul``), swaps ``sys.meta_path`` for a list
    with its own ``__len__`` or adds a key with its own ``__hash__`` to a watched module gets none
    of its code run inside the check (the records' request runs it outside the GPU gate, where such
    code could launch kernels beside another evaluation's timing) and the changes are reported."""
    code = textwrap.dedent('''
        import gc, json, sys
        import torch
        from drkernel.env.guards.audit import StateGuard
        guard = StateGuard(torch); guard.snapshot()
        ran = []
        class Flags:
            def __init__(self, inner): self.inner = inner
            def __getattr__(self, name):
                ran.append(name)
                return getattr(self.inner, name)
        from torch.backends import cuda as backends_cuda
        backends_cuda.matmul = Flags(backends_cuda.matmul)
        class Counting(list):
            def __len__(self):
                ran.append("len")
                return list.__len__(self)
        sys.meta_path = Counting(sys.meta_path)
        gc.callbacks = Counting(gc.callbacks)
        class Key(str):
            def __hash__(self):
                ran.append("hash")
                return str.__hash__(self)
            def __eq__(self, other):
                ran.append("eq")
                return str.__eq__(self, other)
        vars(torch)[Key("shadow")] = 1  # (hashed here, by the candidate's own assignment)
        ran.clear()
        changes = guard.changes()
        print(json.dumps({"ran": ran, "changes": changes}))
    ''')
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert proc.returncode == 0, proc.stderr[-2000:]
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    assert got["ran"] == [], got
    assert any(c.startswith("sys.meta_path:") and "a Counting" in c for c in got["changes"]), got["changes"]
    assert any(c.startswith("gc.callbacks:") and "a Counting" in c for c in got["changes"]), got["changes"]
    assert any("torch has a key that is not a str" in c for c in got["changes"]), got["changes"]
