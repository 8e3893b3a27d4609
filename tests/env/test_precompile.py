"""Compiling ahead in a compiler forked from the worker's zygote (drkernel.env.process.precompile), on this
CPU machine: Triton compiles for an H100 target without a device, the first launch's cache key is
the one the compiler filled, and a compiler that hangs, hogs memory or fails changes nothing and is
killed with its whole process group."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
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
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.ones(1))

    def forward(self, x):
        return torch.relu(x) * self.w


def get_inputs():
    return [torch.randn(1 << 20)]


def get_init_inputs():
    return []
'''

SUFFIX = "__dktest01"

# The worker's first call, in a fresh interpreter with the worker's environment (this test session
# runs Triton's interpreter, which compiles nothing): the worker's private environment and kernel
# names, then a compile-only launch (no GPU here) that counts the cache entries it had to add.
FIRST_CALL = '''
import json, os, sys
from triton.backends.compiler import GPUTarget
from drkernel.env.process.confine import private_environment
from drkernel.env.measure.launches import install_naming
from drkernel.env.process.precompile import CompileOnlyDriver
from drkernel.env.process.loading import import_file
import triton
from drkernel.env.process.triton_cache import SHARED_ENV

work, suffix = sys.argv[1], sys.argv[2]
shared = triton.knobs.cache.dir
env = private_environment(work)
env[SHARED_ENV] = shared
os.environ.update(env)
install_naming(os.path.join(work, "candidate.py"), suffix)
from triton.runtime import driver
from triton.runtime.jit import JITFunction
driver.set_active(CompileOnlyDriver(GPUTarget("cuda", 90, 32)))
before = set(os.listdir(env["TRITON_CACHE_DIR"]))
run = JITFunction.run
JITFunction.run = lambda self, *a, grid, warmup, **k: run(self, *a, grid=grid, warmup=True, **k)
import torch
cand = import_file(os.path.join(work, "candidate.py"))
with torch.device("meta"):
    cand.ModelNew()(torch.empty(1 << 20))
print(json.dumps({"new_entries": len(set(os.listdir(env["TRITON_CACHE_DIR"])) - before)}))
'''


def _confinable() -> bool:
    import platform

    from drkernel.env.process.confine import landlock_abi
    from drkernel.env.process.seccomp import _ABIS

    return landlock_abi() > 0 and platform.machine() in _ABIS


needs_landlock = pytest.mark.skipif(not _confinable(),
                                    reason="no Landlock or seccomp filter here: the compiler refuses to run unconfined")
_ROOT = tempfile.mkdtemp(prefix="drkernel-test-precompile-")


@pytest.fixture(scope="module", autouse=True)
def _stop_zygotes():
    yield
    import shutil

    from drkernel.env.process import zygote

    with zygote._zygotes_lock:
        for key in [k for k in zygote._zygotes if k.startswith("cuda:")]:
            zygote._zygotes.pop(key)[1].close()
    shutil.rmtree(_ROOT, ignore_errors=True)


def _job(work: Path, timeout_s: float) -> dict:
    from drkernel.env.process.precompile import job

    return job(candidate_file=str(work / "candidate.py"), task_source=TASK, task_name="scale", entry_point="Model",
               task_size="full", init_seed=3, kernel_suffix=SUFFIX, target=["cuda", 90, 32], timeout_s=timeout_s)


def _workdir(behaviour: str) -> Path:
    work = Path(tempfile.mkdtemp(dir=_ROOT))
    (work / "candidate.py").write_text(CANDIDATE.replace("BEHAVIOUR", behaviour))
    return work


def _compile(behaviour: str = "pass", timeout_s: float = 60.0, during: object = None,
             work_out: list | None = None) -> tuple[dict, Path]:
    """Fork a compiler from a CUDA worker's zygote (this machine has no GPU: Triton compiles for an
    H100 anyway) for a fresh work directory and wait for it as the grader does; ``during(child)``
    runs while it works."""
    from drkernel.env.process.precompile import Compiler
    from drkernel.env.process.sandbox import worker_env
    from drkernel.env.process.zygote import spawn_compiler

    work = _workdir(behaviour)
    if work_out is not None:
        work_out.append(work)
    compiler = Compiler(spawn_compiler(worker_env("cuda:0"), str(work), _job(work, timeout_s)), str(work))
    if during is not None:
        during(compiler.child)
    waited = compiler.wait(timeout_s)
    waited["pid"] = compiler.pgid
    return waited, work


def _cache(work: Path, suffix: str = "") -> list[str]:
    d = work / "triton-cache"
    return sorted(str(p.relative_to(d)) for p in d.rglob("*" + suffix)) if d.exists() else []


def _group_gone(pgid: int) -> bool:
    from drkernel.env.process.procfs import _group_pids

    deadline = time.monotonic() + 5
    while _group_pids(pgid) and time.monotonic() < deadline:
        time.sleep(0.05)
    return not _group_pids(pgid)


@needs_landlock
def test_kernels_compile_ahead_and_the_first_launch_finds_them():
    waited, work = _compile()
    assert waited["finished"] and waited["complete"] and waited["exit"] == 0, waited
    assert set(waited["phases_s"]) >= {"task", "confine", "import", "build", "forward", "total"}
    assert len(os.listdir(work / "triton-cache")) >= 3  # the kernel and both autotune configs
    assert _cache(work, ".autotune.json") == []  # the compile-only benchmarker's fake timings are not kept
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["PYTHONPATH"] = str(Path(__file__).resolve().parents[2])
    out = subprocess.run([sys.executable, "-c", FIRST_CALL, str(work), SUFFIX], env=env, capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert json.loads(out.stdout.strip().splitlines()[-1]) == {"new_entries": 0}  # nothing compiled again
    assert _group_gone(waited["pid"])


@needs_landlock
def test_an_autotuner_that_asks_for_a_disk_cache_gets_none():
    # built in __init__, after the import, asking to cache: its fake timings must not reach the worker
    waited, work = _compile("k = triton.autotune(configs=[triton.Config({'BLOCK': 256}), triton.Config({'BLOCK': "
                            "512})], key=['n'], cache_results=True)(scale_kernel.fn)\n        y = torch.empty_like(x)"
                            "\n        k[lambda m: (triton.cdiv(x.numel(), m['BLOCK']),)](x, self.w, y, x.numel())")
    assert waited["complete"], waited
    assert _cache(work, ".autotune.json") == []


@needs_landlock
def test_a_compiler_that_hangs_is_killed_with_its_group_at_the_time_limit():
    waited, work = _compile("out = torch.empty_like(x)\n        relu_kernel[(1,)](x, out, x.numel(), BLOCK=1024)"
                            "\n        while True: pass", timeout_s=4.0)
    assert not waited["finished"] and waited["reason"] == "time limit"
    assert waited["seconds"] < 10 and waited["exit"] == -9
    assert _cache(work)  # it was in the forward (the kernel before the loop compiled) when it was killed
    assert _group_gone(waited["pid"])


@needs_landlock
def test_a_compiler_is_killed_when_it_and_its_worker_pass_the_memory_limit():
    """The worker's memory watcher counts the compiler's group from its start (also while the worker
    loads, before the grader waits for it) and kills the compiler, not the worker."""
    from drkernel.env.process.sandbox import CandidateProcess, start_method_default

    if start_method_default() != "zygote":
        pytest.skip("workers start by exec here: no zygote, no compiler")
    work_behaviour = "hog = [b'x' * (64 << 20) for _ in range(48)]\n        while True: pass"  # 3 GiB
    with CandidateProcess("cpu", memory_limit_mb=1500).wait_ready() as proc:
        (proc.workdir / "candidate.py").write_text(CANDIDATE.replace("BEHAVIOUR", work_behaviour))
        # the CPU worker's zygote (Triton's interpreter): the forward's hog comes before any kernel
        compiler = proc.start_compiler(_job(proc.workdir, 30.0))
        deadline = time.monotonic() + 30
        while compiler.running and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not compiler.running and compiler.reason.startswith("memory limit"), compiler.reason
        assert proc.alive and proc.failure is None  # the worker goes on
        waited = compiler.wait(1.0)
        assert not waited["finished"] and waited["exit"] == -9


@needs_landlock
def test_the_compiler_is_confined_in_its_own_group_and_holds_nothing_of_the_graders():
    from drkernel.env.process.precompile import PHASES_FILE

    seen: dict = {}

    def look(child):
        phases = Path(child_work[0]) / PHASES_FILE
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:  # until it spins in the forward (confined, imported, built)
            try:
                if "build" in json.loads(phases.read_text()):
                    break
            except (OSError, ValueError):
                pass
            time.sleep(0.05)
        time.sleep(0.2)
        seen["fields"] = {line.split(":")[0]: line.split(":", 1)[1].strip()
                          for line in Path(f"/proc/{child.pid}/status").read_text().splitlines()}
        seen["fds"] = sorted(os.readlink(f"/proc/{child.pid}/fd/{f}") for f in os.listdir(f"/proc/{child.pid}/fd"))
        seen["pgid"] = os.getpgid(child.pid)

    child_work: list = []
    waited, _ = _compile("while True: pass", timeout_s=60.0, during=look, work_out=child_work)
    assert seen["pgid"] == waited["pid"] != os.getpgid(0)  # a group of its own, as the zygote reported
    assert seen["fields"]["Seccomp"] == "2" and seen["fields"]["NoNewPrivs"] == "1"  # setsid/setpgid refused
    # only /dev/null and library files: no socket, pipe, stage (memfd) or device file
    assert all(f == "/dev/null" or f.endswith(".so") for f in seen["fds"]), seen["fds"]


@needs_landlock
def test_the_compiler_cannot_rewrite_the_file_the_worker_imports():
    """The worker imports ``candidate.py`` after the compiler started: a compiler that rewrote it would
    have the worker run code the static checks never saw. Only the cache and tmp are its to write."""
    behaviour = "open(__file__, 'a').write('\\nimport os  # smuggled\\n')"
    waited, work = _compile(behaviour)
    assert waited["exit"] == 2  # Landlock refused the write: the forward raised
    assert (work / "candidate.py").read_text() == CANDIDATE.replace("BEHAVIOUR", behaviour)


def test_the_phases_file_cannot_block_or_mislead_the_grader(tmp_path):
    """The compiler's phase timers come from a path the candidate controls: a FIFO there (an open
    for reading would block forever), a link to another file, or non-numbers give no phases."""
    from drkernel.env.process.precompile import PHASES_FILE, Compiler

    c = Compiler.__new__(Compiler)
    c.workdir = str(tmp_path)
    path = tmp_path / PHASES_FILE
    path.parent.mkdir()
    os.mkfifo(path)
    t0 = time.monotonic()
    assert c.phases() == {} and time.monotonic() - t0 < 1.0
    path.unlink()
    (tmp_path / "elsewhere.json").write_text('{"total": 1.0}')
    path.symlink_to(tmp_path / "elsewhere.json")
    assert c.phases() == {}
    path.unlink()
    path.write_text('{"total": NaN, "forward": -1, "build": 0.5, "x": "y"}')
    assert c.phases() == {}  # one value is not a number: none is taken
    path.write_text('{"total": Infinity, "build": 0.5}')
    assert c.phases() == {"build": 0.5}


@needs_landlock
def test_a_candidate_that_tries_to_leave_its_group_compiles_nothing_further():
    waited, work = _compile("import os\n        os.setsid()")
    assert waited["finished"] and not waited["complete"] and waited["exit"] == 2  # refused: the forward raised
    assert _cache(work) == []
    assert _group_gone(waited["pid"])


@needs_landlock
def test_a_forward_that_reads_values_compiles_what_it_reached():
    # .item() has no value on a meta tensor: the compiler stops there; the kernel before it compiled
    waited, work = _compile("out = torch.empty_like(x)\n        relu_kernel[(1,)](x, out, x.numel(), "
                            "BLOCK=1024)\n        if out.sum().item() > 0: pass")
    assert waited["exit"] == 2 and waited["reason"].startswith("the forward stopped early") and _cache(work)


def test_a_worker_started_by_exec_has_no_compiler():
    from drkernel.env.process.sandbox import CandidateProcess

    with CandidateProcess("cpu", start="exec") as proc:
        assert proc.start_compiler({"unused": True}) is None


def test_the_seccomp_filter_refuses_leaving_the_group_and_new_sockets_in_every_thread_and_child(tmp_path):
    """Native code is not audited: setsid/setpgid would leave the grader's group, and a new UNIX
    socket could reach a service listening on a path (Landlock does not govern that connect), as
    could one end of a datagram socket pair (sendto a path); connected pairs reach nobody."""
    import socket

    listening = socket.socket(socket.AF_UNIX)
    listening.bind(str(tmp_path / "service.sock"))
    listening.listen(1)
    datagrams = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)  # as journald's /dev/log
    datagrams.bind(str(tmp_path / "log.sock"))
    datagrams.setblocking(False)
    script = (f"LISTENING = {str(tmp_path / 'service.sock')!r}\nDATAGRAMS = {str(tmp_path / 'log.sock')!r}\n"
              + '''
import os, subprocess, sys, threading, time
from drkernel.env.process.seccomp import fix_process_group
alive = threading.Event()
t = threading.Thread(target=alive.wait); t.start()
why_not = fix_process_group()
if why_not:
    alive.set()
    print({"unavailable": why_not})
    raise SystemExit(0)
out = {}
import socket
for name, call in (("setsid", os.setsid), ("setpgid", lambda: os.setpgid(0, 0)),
                   ("unix", lambda: socket.socket(socket.AF_UNIX).connect(LISTENING)),
                   ("udp", lambda: socket.socket(socket.AF_INET, socket.SOCK_DGRAM)),
                   ("pair", lambda: socket.socketpair()),
                   ("seqpacket_pair", lambda: socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)),
                   ("datagram_pair", lambda: socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)[0]
                    .sendto(b"READY=1", DATAGRAMS))):
    try:
        call(); out[name] = "allowed"
    except PermissionError:
        out[name] = "refused"
pid = os.fork()
if pid == 0:
    try:
        os.setsid(); os._exit(1)
    except PermissionError:
        os._exit(0)
out["child"] = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
out["exec"] = subprocess.run([sys.executable, "-c", "import os; os.setsid()"], capture_output=True).returncode
out["thread"] = open(f"/proc/self/task/{t.native_id}/status").read().split("Seccomp:")[1].split()[0]
out["pgid"] = os.getpgid(0) == os.getpgid(os.getpid())
alive.set()
print(out)
''')
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[2]))
    try:
        out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=60)
        try:
            got = datagrams.recv(64)
        except BlockingIOError:
            got = None
    finally:
        listening.close()
        datagrams.close()
    assert got is None, "a datagram from the confined process reached a socket outside it"
    assert out.returncode == 0, out.stderr[-2000:]
    result = eval(out.stdout.strip())  # noqa: S307 - our own script's dict
    if "unavailable" in result:
        pytest.skip(f"no seccomp filter here: {result['unavailable']}")
    assert result == {"setsid": "refused", "setpgid": "refused", "unix": "refused", "udp": "refused",
                      "pair": "allowed", "seqpacket_pair": "allowed", "datagram_pair": "refused",
                      "child": 0, "exec": 1, "thread": "2", "pgid": True}
