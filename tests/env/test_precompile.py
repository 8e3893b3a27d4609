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

# Runs in a fresh interpreter (the test session runs Triton's interpreter, which compiles nothing):
# forks the compiling child as the worker does, awaits it as the grader does, then launches as the
# worker's first call would (compile-only here: no GPU) and counts what it had to compile anew.
DRIVER = '''
import json, os, sys, time, types, importlib.util
from pathlib import Path
from triton.backends.compiler import GPUTarget
from drkernel.env.precompile import CompileOnlyDriver, EXIT_DONE, await_compiler, fork_compiler

work = Path(sys.argv[1])
spec = importlib.util.spec_from_file_location("task", work / "task.py")
task = importlib.util.module_from_spec(spec)
spec.loader.exec_module(task)
h = types.SimpleNamespace(workdir=work, candidate_file=str(work / "candidate.py"), entry_point="Model",
                          loaded=types.SimpleNamespace(module=task))
target = GPUTarget("cuda", 90, 32)
pid = fork_compiler(h, target, None, ([], {}), require_landlock=False)
waited = await_compiler(pid, os.getpgid(0), float(sys.argv[2]))
status = os.waitpid(pid, 0)[1]
code = os.waitstatus_to_exitcode(status)
hits = None
if code == EXIT_DONE:
    from triton.runtime import driver
    from triton.runtime.jit import JITFunction
    driver.set_active(CompileOnlyDriver(target))
    before = set(os.listdir(os.environ["TRITON_CACHE_DIR"]))
    run = JITFunction.run
    JITFunction.run = lambda self, *a, grid, warmup, **k: run(self, *a, grid=grid, warmup=True, **k)
    import torch
    cand_spec = importlib.util.spec_from_file_location("candidate", work / "candidate.py")
    cand = importlib.util.module_from_spec(cand_spec)
    cand_spec.loader.exec_module(cand)
    with torch.device("meta"):
        model = cand.ModelNew()
        model(torch.empty(1 << 20))
    hits = {"new_entries": len(set(os.listdir(os.environ["TRITON_CACHE_DIR"])) - before)}
print(json.dumps({"waited": waited, "exit": code, "hits": hits}))
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
    assert data["waited"]["finished"] and data["exit"] == 0, data
    assert data["hits"]["new_entries"] == 0  # nothing compiled again: the first launch hit the cache
    assert len(list((tmp_path / "triton-cache").iterdir())) >= 3  # the kernel and both autotune configs


def test_a_child_that_hangs_is_killed_at_the_time_limit(tmp_path):
    data = _run(tmp_path, "while True: pass", timeout_s=3.0)
    assert not data["waited"]["finished"] and data["waited"]["reason"] == "time limit"
    assert data["waited"]["seconds"] < 10 and data["exit"] == -9  # killed by the grader's side


def test_the_child_holds_none_of_its_parents_descriptors(tmp_path):
    data = _run(tmp_path, "import os, sys; os.write(int(sys.argv[3]), b'leak')")
    assert data["leaked"] == b""  # the parent's pipe (as the protocol socket or the stage) was closed
    assert data["waited"]["finished"] and data["exit"] == 2  # the forward raised: compiled nothing more


def test_a_forward_that_reads_values_compiles_what_it_reached(tmp_path):
    # .item() has no value on a meta tensor: the child stops there; the kernel before it compiled
    data = _run(tmp_path, "out = torch.empty_like(x)\n        relu_kernel[(1,)](x, out, x.numel(), "
                          "BLOCK=1024)\n        if out.sum().item() > 0: pass")
    assert data["exit"] == 2 and len(list((tmp_path / "triton-cache").iterdir())) >= 1


def test_a_pid_outside_the_workers_group_is_neither_awaited_nor_killed():
    from drkernel.env.precompile import await_compiler

    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"], start_new_session=True)
    try:
        out = await_compiler(other.pid, os.getpgid(0), 1.0)  # e.g. a forged pid in the load's reply
        assert not out["finished"] and "process group" in out["reason"]
        assert other.poll() is None  # not killed
    finally:
        other.kill()
        other.wait()
