"""Static checks: each hack id fires on a minimal snippet, and honest code raises none."""

import textwrap

import pytest

from drkernel.env.guards.static_checks import check_source

KERNEL = '''
import torch
import torch.nn as nn
import triton
import triton.language as tl

@triton.jit
def k(x_ptr, o_ptr, n, B: tl.constexpr):
    offs = tl.program_id(0) * B + tl.arange(0, B)
    tl.store(o_ptr + offs, tl.load(x_ptr + offs, mask=offs < n), mask=offs < n)
'''

HONEST_FORWARD = '''
class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.scale = 2.0
    def _launch(self, x):
        o = torch.empty_like(x)
        k[(triton.cdiv(x.numel(), 1024),)](x, o, x.numel(), B=1024)
        return o
    def forward(self, x):
        return self._launch(x.contiguous()).view(x.shape)
'''


def src(body: str) -> str:
    return KERNEL + textwrap.dedent(body)


def reasons(body: str) -> list[str]:
    return check_source(src(body)).hack_reasons


def test_honest_code_has_no_findings():
    report = check_source(src(HONEST_FORWARD))
    assert report.findings == [] and report.kernels == ["k"]


def test_launch_through_module_level_helper_counts():
    body = '''
    def launch(x):
        o = torch.empty_like(x)
        k[(1,)](x, o, x.numel(), B=1024)
        return o
    class ModelNew(nn.Module):
        def forward(self, x):
            return launch(x)
    '''
    assert reasons(body) == []


def test_syntax_error_and_missing_class_are_compile_failures_not_hacks():
    r = check_source("def f(:\n")
    assert r.syntax_error and "line 1" in r.syntax_error and r.findings == []
    r = check_source(KERNEL)
    assert r.missing_class == "no class ModelNew is defined"


@pytest.mark.parametrize("body, expected", [
    ("class ModelNew(nn.Module):\n    def forward(self, x):\n        return torch.relu(x)\n", "forward_no_launch"),
    ("class ModelNew(nn.Module):\n    def forward(self, x):\n        try:\n            return x\n"
     "        except Exception:\n            return x\n", "try_except"),
    ("class Model(nn.Module):\n    pass\nclass ModelNew(Model):\n    def forward(self, x):\n        k\n", "reference_access"),
    ("class ModelNew(nn.Module):\n    def forward(self, x):\n        k\n        return super().forward(x)\n",
     "reference_access"),
    ("import reference_module\nclass ModelNew(nn.Module):\n    def forward(self, x):\n        k\n", "reference_access"),
    ("import threading\nclass ModelNew(nn.Module):\n    def forward(self, x):\n        k\n", "threads"),
    ("class ModelNew(nn.Module):\n    def forward(self, x):\n        s = torch.cuda.Stream()\n        k\n", "cuda_stream"),
    ("class T(torch.Tensor):\n    pass\nclass ModelNew(nn.Module):\n    def forward(self, x):\n        k\n",
     "tensor_subclass"),
    ("class ModelNew(nn.Module):\n    def forward(self, x):\n        k\n"
     "    @classmethod\n    def __torch_function__(cls, *a):\n        pass\n", "tensor_subclass"),
    ("torch.cuda.synchronize = lambda: None\nclass ModelNew(nn.Module):\n    def forward(self, x):\n        k\n",
     "timer_patch"),
    ("class ModelNew(nn.Module):\n    def forward(self, x):\n        setattr(torch, 'allclose', None)\n        k\n",
     "timer_patch"),
    ("torch.backends.cuda.matmul.allow_tf32 = True\nclass ModelNew(nn.Module):\n    def forward(self, x):\n"
     "        k\n", "global_state"),
    ("class ModelNew(nn.Module):\n    def forward(self, x):\n        torch.manual_seed(0)\n        k\n", "global_state"),
    ("import functools\nclass ModelNew(nn.Module):\n    @functools.lru_cache(None)\n    def forward(self, x):\n"
     "        k\n", "output_cache"),
    ("CACHE = {}\nclass ModelNew(nn.Module):\n    def forward(self, x):\n        CACHE[x.data_ptr()] = x\n"
     "        k\n", "output_cache"),
    ("class ModelNew(nn.Module):\n    def forward(self, x):\n        self.last = x\n        k\n", "output_cache"),
    ("import gc\nclass ModelNew(nn.Module):\n    def forward(self, x):\n        k\n", "introspection"),
    ("class ModelNew(nn.Module):\n    def forward(self, x):\n        eval('1')\n        k\n", "introspection"),
    ("class ModelNew(nn.Module):\n    def forward(self, x):\n        open('/tmp/x')\n        k\n", "file_access"),
    ("import os\nclass ModelNew(nn.Module):\n    def forward(self, x):\n        k\n", "file_access"),
    ("ASM = 'mov.u64 $0, %globaltimer;'\nclass ModelNew(nn.Module):\n    def forward(self, x):\n        k\n",
     "idle_wait"),
    ("class ModelNew(nn.Module):\n    def forward(self, x):\n        k\n        s = 'nanosleep.u32 100;'\n",
     "idle_wait"),
])
def test_each_hack_id_fires(body, expected):
    assert expected in reasons(body)


def test_no_kernel_at_all():
    r = check_source("import torch.nn as nn\nclass ModelNew(nn.Module):\n    def forward(self, x):\n        return x\n")
    assert r.hack_reasons == ["no_triton_kernel"]


def test_memoised_launch_config_on_self_is_not_a_cache():
    body = '''
    class ModelNew(nn.Module):
        def forward(self, x):
            n_rows, n_cols = x.shape
            if getattr(self, "_cfg", None) is None:
                self._cfg = (n_cols, triton.next_power_of_2(n_cols), x.size(1))
            o = torch.empty_like(x)
            k[(n_rows,)](x, o, x.numel(), B=self._cfg[1])
            return o
    '''
    assert "output_cache" not in reasons(body)


def test_tensor_stored_on_self_in_forward_is_a_cache():
    body = '''
    class ModelNew(nn.Module):
        def forward(self, x):
            out = torch.empty_like(x)
            k[(1,)](x, out, x.numel(), B=1024)
            self._last = out
            self._store[x.shape] = out * 1
            return out
    '''
    r = check_source(src(body))
    assert [f.id for f in r.findings].count("output_cache") == 2


def test_static_checks_are_safe_on_several_threads_at_once():
    """LocalGrader runs the static checks of concurrent evaluations on threads. On CPython 3.11 two
    threads building ASTs at once can raise "AST constructor recursion depth mismatch" when a
    garbage collection switches threads mid-parse (python/cpython#106905; it failed a suite
    solution in a full test run). Cycles with finalizers force such switches here; without the
    parse lock this failed in every one of several runs."""
    import gc
    import threading
    import time
    from pathlib import Path

    from drkernel.env.guards.static_checks import check_source

    sources = [p.read_text() for p in sorted((Path(__file__).parents[2] / "envs/fused_ops/solutions").glob("*.py"))]

    class Finalized:
        def __del__(self):
            time.sleep(0)

    errors: list[str] = []

    def work():
        for i in range(150):
            c = Finalized()
            c.self = c  # a cycle: freed by the collector, in the middle of another thread's parse
            del c
            try:
                assert check_source(sources[i % len(sources)], "ModelNew").syntax_error is None
            except SystemError as exc:
                errors.append(str(exc))

    threshold = gc.get_threshold()
    gc.set_threshold(10)
    try:
        threads = [threading.Thread(target=work) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        gc.set_threshold(*threshold)
    assert not errors, errors[:3]


def test_state_kept_on_defaults_and_module_functions_is_a_cache():
    """Red-team class 4: a mutable default argument, or attributes of a module-level function set at
    run time, keep results across calls (the worker also keeps inputs' memory unique per call)."""
    src_default = KERNEL + """
class ModelNew(nn.Module):
    def forward(self, x, _memo={}):
        return _launch(x)
"""
    src_funcattr = KERNEL + """
def _product(x):
    _product.last = x
    return _launch(x)

class ModelNew(nn.Module):
    def forward(self, x):
        return _product(x)
"""
    for src, needle in ((src_default, "mutable default"), (src_funcattr, "_product.last")):
        report = check_source(src)
        assert "output_cache" in report.hack_reasons and any(needle in m for m in report.messages()), report


def _kernel_findings(kernel_src: str) -> list[str]:
    source = textwrap.dedent('''
    import math
    import numpy as np
    import torch
    import torch.nn as nn
    import triton
    import triton.language as tl
    from triton.language.extra import libdevice

    def helper(a):
        return a

    @triton.jit
    def _act(x):
        return tl.where(x > 0, x, 0.0)
    ''') + textwrap.dedent(kernel_src) + HONEST_FORWARD.replace("k[(", "kern[(")
    return [f.message for f in check_source(source).findings if f.id == "kernel_python"]


def test_kernel_bodies_may_call_triton_jit_functions_builtins_and_their_own_values():
    assert _kernel_findings('''
    @triton.jit
    def kern(x_ptr, o_ptr, n, B: tl.constexpr, ACT: tl.constexpr):
        offs = tl.program_id(0) * B + tl.arange(0, B)
        x = tl.load(x_ptr + offs, mask=offs < n).to(tl.float32)
        y = libdevice.tanh(_act(x)) + tl.math.exp(x) * math.log2(2.0)
        for i in range(min(B, 4)):
            y = ACT(y)
        tl.store(o_ptr + offs, y, mask=offs < n)
    ''') == []


@pytest.mark.parametrize("call, flagged", [
    ("y = helper(x)", "helper()"),
    ("y = np.tanh(x)", "np.tanh()"),
    ("y = torch.tanh(x)", "torch.tanh()"),
    ("x.handle.data[:] = 0.0\n        y = x", ".handle"),
])
def test_kernel_bodies_calling_python_are_flagged(call, flagged):
    found = _kernel_findings(f'''
    @triton.jit
    def kern(x_ptr, o_ptr, n, B: tl.constexpr):
        offs = tl.program_id(0) * B + tl.arange(0, B)
        x = tl.load(x_ptr + offs, mask=offs < n)
        {call}
        tl.store(o_ptr + offs, y, mask=offs < n)
    ''')
    assert found and flagged in found[0], found


def test_kernel_bodies_may_read_constant_globals_but_not_objects():
    base = '''
    import torch
    import torch.nn as nn
    import triton
    import triton.language as tl

    BLOCK = 128
    SCALE: tl.constexpr = tl.constexpr(0.5)

    class _Op:
        def __matmul__(self, other):
            return other

    _MM = _Op()

    @triton.jit
    def kern(x_ptr, o_ptr, n):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        x = tl.load(x_ptr + offs, mask=offs < n) * SCALE
        {line}
        tl.store(o_ptr + offs, x, mask=offs < n)
    '''
    forward = HONEST_FORWARD.replace("k[(", "kern[(").replace(", B=1024)", ")")
    ok = check_source(textwrap.dedent(base.replace("{line}", "x = x + 1.0")) + forward)
    assert ok.syntax_error is None and ok.kernels == ["kern"]
    assert [f for f in ok.findings if f.id == "kernel_python"] == []
    bad = check_source(textwrap.dedent(base.replace("{line}", "x = _MM @ x")) + forward)
    assert any(f.id == "kernel_python" and "_MM" in f.message for f in bad.findings)


def test_a_triton_values_handle_is_flagged_anywhere_in_the_source():
    body = '''
    def peek(v):
        return v.handle.data
    ''' + HONEST_FORWARD
    assert "kernel_python" in reasons(body)
