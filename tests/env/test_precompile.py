"""Compiling ahead in a child without GPU (drkernel.env.precompile), on this CPU machine: Triton
compiles for an H100 target without a device, the first launch's cache key is the one the child
filled, and a child that hangs, fails or tries the parent's descriptors changes nothing."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

triton = pytest.importorskip("triton")

CANDIDATE = '''
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def relu_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.maximum(tl.load(x_ptr + offs, mask=mask), 0.0), mask=mask)


@triton.autotune(configs=[triton.Config({"BLOCK": 256}), triton.Config({"BLOCK": 512})], key=["n"])
@triton.jit
def scale_kernel(x_ptr, w_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) * tl.load(w_ptr), mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.ones(1))

    def forward(self, x):
        BEHAVIOUR
        out = torch.empty_like(x)
        relu_kernel[(triton.cdiv(x.numel(), 1024),)](x, out, x.numel(), BLOCK=1024)
        y = torch.empty_like(x)
        scale_kernel[lambda m: (triton.cdiv(x.numel(), m["BLOCK"]),)](out, self.w, y, x.numel())
        return y
'''

TASK = '''
import torch
def get_inputs():
    return [torch.randn(1 << 20)]
'''

# Runs in a fresh interpreter (the test session runs Triton's interpreter, which compiles nothing).
DRIVER = '''
import json, os, sys, time, types, importlib.util
from pathlib import Path
from triton.backends.compiler import GPUTarget
from drkernel.env.precompile import precompile

work = Path(sys.argv[1])
def load(name, path):
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod
cand = load("candidate", work / "candidate.py")
task = load("task", work / "task.py")
h = types.SimpleNamespace(workdir=work, model=cand.ModelNew(), loaded=types.SimpleNamespace(module=task))
target = GPUTarget("cuda", 90, 32)
report = precompile(h, float(sys.argv[2]), target=target)
hits = None
if report["complete"]:
    # the parent's own first launch: the same key, found in the cache the child filled
    from triton.runtime import driver
    from triton.runtime.jit import JITFunction
    from drkernel.env.precompile import CompileOnlyDriver
    driver.set_active(CompileOnlyDriver(target))
    before = set(os.listdir(os.environ["TRITON_CACHE_DIR"]))
    run = JITFunction.run
    JITFunction.run = lambda self, *a, grid, warmup, **k: run(self, *a, grid=grid, warmup=True, **k)
    import torch
    t = time.perf_counter()
    meta = {n: torch.empty(p.shape, device="meta") for n, p in h.model.named_parameters()}
    try:
        torch.func.functional_call(h.model, meta, (torch.empty(1 << 20, device="meta"),))
    except RuntimeError:  # a forward that reads values stops here too
        pass
    hits = {"new_entries": len(set(os.listdir(os.environ["TRITON_CACHE_DIR"])) - before),
            "seconds": time.perf_counter() - t}
print(json.dumps({"report": report, "hits": hits, "open_fd": int(sys.argv[3])}))
'''


def _run(tmp_path: Path, behaviour: str, timeout_s: float = 60.0) -> dict:
    (tmp_path / "candidate.py").write_text(CANDIDATE.replace("BEHAVIOUR", behaviour))
    (tmp_path / "task.py").write_text(TASK)
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["TRITON_CACHE_DIR"] = str(tmp_path / "triton-cache")
    env["TMPDIR"] = str(tmp_path / "tmp")  # as a worker's: its confinement writes only in its directory
    (tmp_path / "tmp").mkdir()
    env["PYTHONPATH"] = str(Path(__file__).resolve().parents[2])
    r, w = os.pipe()  # a descriptor of the parent the child must not reach
    try:
        out = subprocess.run([sys.executable, "-c", DRIVER, str(tmp_path), str(timeout_s), str(w)], env=env,
                             capture_output=True, text=True, timeout=300, pass_fds=(w,))
    finally:
        os.close(w)
        leaked = os.read(r, 64) if _readable(r) else b""
        os.close(r)
    assert out.returncode == 0, out.stderr[-2000:]
    data = json.loads(out.stdout.strip().splitlines()[-1])
    data["leaked"] = leaked
    return data


def _readable(fd: int) -> bool:
    import select

    return bool(select.select([fd], [], [], 0)[0])


def test_kernels_compile_ahead_and_the_first_launch_finds_them(tmp_path):
    data = _run(tmp_path, "pass")
    assert data["report"]["complete"], data
    assert data["report"]["kernels"] >= 3  # the plain kernel and both autotune configs
    assert data["hits"]["new_entries"] == 0  # nothing compiled again: the first launch hit the cache


def test_a_child_that_hangs_is_killed_at_the_time_limit(tmp_path):
    data = _run(tmp_path, "while True: pass", timeout_s=3.0)
    assert not data["report"]["complete"] and data["report"]["reason"] == "time limit"
    assert data["report"]["seconds"] < 10


def test_the_child_holds_none_of_its_parents_descriptors(tmp_path):
    data = _run(tmp_path, "import os, sys; os.write(int(sys.argv[3]), b'leak')")
    assert data["leaked"] == b""  # the parent's pipe (as the protocol socket or the stage) was closed
    assert not data["report"]["complete"] and "OSError" in data["report"]["reason"]


def test_a_forward_that_reads_values_compiles_what_it_reached(tmp_path):
    # .item() has no value on a meta tensor: the child stops there; the kernels before it compiled
    data = _run(tmp_path, "pass\n        out = torch.empty_like(x)\n        relu_kernel[(1,)](x, out, x.numel(), "
                          "BLOCK=1024)\n        if out.sum().item() > 0: pass")
    assert data["report"]["kernels"] >= 1
