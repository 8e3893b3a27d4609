"""Compiling a candidate's Triton kernels ahead, in a process that never had a GPU.

A Triton kernel compiles when it is first launched: inside the first correctness call, 0.45 s of
that call on an H100 machine (0.55 s with 8 evaluations in flight; the other six calls took 0.014 s
together). Correctness calls run in the GPU gate's shared side (candidate code may launch GPU work
at any point of a call), so every timing queued meanwhile waited for the compiler: the first call
was the longest shared hold of an evaluation.

**The compiler.** Right before the worker's load request, the grader asks the worker's zygote
(:mod:`drkernel.env.zygote`: the preloaded template the worker itself was forked from, which never
initialised CUDA) to fork a compiler for the worker's work directory (:func:`start`). The compiler

* is a process of its own session and process group (pgid = the pid the zygote reports, not one
  the candidate could name), dies with the zygote (``PR_SET_PDEATHSIG``), has a CPU-time limit, no
  descriptor of the grader's (no protocol socket, no output stage, no output pipe) and never had a
  GPU: no device file was ever opened in it and none may be (:func:`drkernel.env.confine.confine`
  with ``devices=False``, so the CUDA driver cannot start there either);
* takes the worker's private environment (the same Triton cache directory and shared cache layer)
  and kernel names (the evaluation's suffix), confines itself as a worker does (Landlock: writes only
  in the work directory, no TCP, no signals out; seccomp: it and everything it starts stay in its
  process group) and installs the worker's audit (:class:`drkernel.env.audit.Auditor`, enforcing)
  before the candidate is imported; without Landlock or the group fix it compiles nothing;
* points Triton at :class:`CompileOnlyDriver` (the GPU's target as the grader read it; no device,
  no stream, a benchmarker that times nothing, so an autotuner compiles every config, and no autotune
  result is cached) and makes every launch a compile-only ``warmup`` run that also builds the
  kernel's launcher (the C stub Triton compiles per signature: 0.2 s of a first call whose kernel
  came from the cache);
* imports the candidate, builds ModelNew under the meta device and calls its forward on the task's
  ``get_inputs()`` moved to the meta device. A forward that reads values (``.item()``), a model that
  needs CUDA, an error or the time limit only end it early: what it did not reach compiles in the
  first call, as without it.

Kernels compiled there land in the worker's Triton cache under the key the first call computes (same
source, kernel names, target and specialization: a meta tensor's address is 0, aligned like every
allocation), so the first call loads them instead of compiling.

**The grader** waits for the compiler after the load's reply, outside the GPU gate
(:func:`await_compiler`, up to ``EvalConfig.precompile_timeout_s``), counting the resident memory of
its process group against the evaluation's memory limit, then kills the whole group whatever it did.
Its exit status comes from the zygote. Nothing the compiler does decides a verdict
(``details["precompile"]`` is diagnostics): it can only write into the worker's work directory,
which the candidate's code in the worker can too. It runs beside the worker's load (which holds the
GPU gate's shared side) and never beside a timing: the evaluation awaits it before its first call.
"""

from __future__ import annotations

import os
import signal
import time
from typing import Any

EXIT_DONE, EXIT_PARTIAL, EXIT_FAILED, EXIT_UNCONFINED = 0, 1, 2, 3

class CompileOnlyDriver:
    """A Triton driver for compiling without a device: the target is fixed, nothing launches."""

    def __init__(self, target: Any):
        self.target = target

    @classmethod
    def is_active(cls) -> bool:
        return True

    def get_current_device(self) -> int:
        return 0

    def get_current_stream(self, device: Any = None) -> int:
        return 0

    def get_current_target(self) -> Any:
        return self.target

    def get_active_torch_device(self) -> Any:
        import torch

        return torch.device("meta")

    def get_benchmarker(self) -> Any:
        def bench(fn: Any, quantiles: Any = None, **_: Any) -> Any:
            fn()  # compiles the config (a warm-up run launches nothing)
            return [1.0] * len(quantiles) if quantiles else 1.0

        return bench

    def get_device_interface(self) -> Any:
        raise RuntimeError("no device while compiling ahead")

    def get_empty_cache_for_benchmark(self) -> Any:
        raise RuntimeError("no device while compiling ahead")

    def clear_cache(self, cache: Any) -> None:
        pass


def cuda_target(device: Any) -> list[Any]:
    """In the grader: Triton's compile target for CUDA ``device`` as ``[backend, arch, warp_size]``
    (what Triton's CUDA driver reports there: capability 9.0 is arch 90)."""
    import torch

    major, minor = torch.cuda.get_device_capability(device)
    return ["cuda", major * 10 + minor, 32]


def job(*, candidate_file: str, task_source: str, task_name: str, entry_point: str, task_size: str,
        init_seed: int, kernel_suffix: str, target: list[Any], timeout_s: float) -> dict[str, Any]:
    """What a compiler needs, as JSON (sent to the zygote)."""
    return {"candidate_file": candidate_file, "task_source": task_source, "task_name": task_name,
            "entry_point": entry_point, "task_size": task_size, "init_seed": int(init_seed),
            "kernel_suffix": kernel_suffix, "target": list(target), "cpu_s": max(30, int(3 * timeout_s))}


def await_compiler(child: Any, timeout_s: float, memory_limit_bytes: int) -> dict[str, Any]:
    """In the grader: wait at most ``timeout_s`` for the compiler ``child`` (a
    :class:`drkernel.env.zygote.ZygoteChild`), its process group's resident memory at most
    ``memory_limit_bytes``, then kill the group. Returns ``{"finished", "complete", "exit",
    "seconds"}`` (+ ``"reason"`` when it did not finish)."""
    from drkernel.env.sandbox import group_rss_bytes

    t0 = time.monotonic()
    reason = None
    try:
        while child.poll() is None:
            if time.monotonic() - t0 >= timeout_s:
                reason = "time limit"
                break
            if group_rss_bytes(child.pid) > memory_limit_bytes:
                reason = f"memory limit ({memory_limit_bytes >> 20} MiB)"
                break
            try:
                child.wait(0.02)
            except Exception:  # noqa: BLE001 - subprocess.TimeoutExpired: look again
                pass
    finally:
        kill_group(child.pid)
    code = child.wait(5.0) if child.returncode is None else child.returncode
    out: dict[str, Any] = {"finished": reason is None, "complete": reason is None and code == EXIT_DONE,
                           "exit": code, "seconds": round(time.monotonic() - t0, 4)}
    if reason:
        out["reason"] = reason
    elif code == EXIT_UNCONFINED:
        out["reason"] = "the compiler could not confine itself (Landlock or seccomp unavailable)"
    return out


def kill_group(pgid: int) -> None:
    """SIGKILL to process group ``pgid`` and to any member a scan of /proc still finds."""
    from drkernel.env.sandbox import _group_pids

    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    for pid in _group_pids(pgid):
        try:
            os.kill(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


def compile_main(workdir: str, job: dict[str, Any]) -> int:
    """The compiler process (forked by the zygote, in its own session; see the module docstring).
    Returns its exit code: EXIT_DONE when the whole forward ran, EXIT_PARTIAL / EXIT_FAILED when it
    stopped early, EXIT_UNCONFINED when it could not confine itself."""
    import ctypes
    import resource

    ctypes.CDLL(None).prctl(1, signal.SIGKILL, 0, 0, 0)  # PR_SET_PDEATHSIG: dies with the zygote
    resource.setrlimit(resource.RLIMIT_CPU, (job["cpu_s"], job["cpu_s"]))
    try:
        import tempfile
        from pathlib import Path

        import triton
        import torch
        from triton.backends.compiler import GPUTarget

        from drkernel.env.audit import Auditor
        from drkernel.env.confine import confine, private_environment
        from drkernel.env.launches import install_naming
        from drkernel.env.task import Task, split_init_inputs
        from drkernel.env.triton_cache import SHARED_ENV

        backend, arch, warp_size = job["target"]
        if backend != "cuda":
            return EXIT_FAILED
        from triton.backends.nvidia.driver import CudaLauncher

        loaded = Task.from_source(job["task_source"], name=job["task_name"],
                                  entry_point=job["entry_point"]).load(job["task_size"])
        init_args = split_init_inputs(loaded.init_inputs(job["init_seed"]))
        os.environ["DRKERNEL_TASK_SIZE"] = job["task_size"]
        shared = triton.knobs.cache.dir  # as the worker computes its shared layer (worker._confine)
        env = private_environment(workdir)
        if shared:
            env[SHARED_ENV] = shared
        os.environ.update(env)
        tempfile.tempdir = env["TMPDIR"]
        os.makedirs(env["TRITON_CACHE_DIR"], exist_ok=True)
        candidate_file = str(Path(job["candidate_file"]).resolve())
        install_naming(candidate_file, job["kernel_suffix"])
        report = confine(workdir, extra_read=[shared] if shared and os.path.isdir(shared) else None, devices=False)
        if not report.get("landlock") or report.get("reason") or not report["process_group"].startswith("fixed"):
            return EXIT_UNCONFINED
        auditor = Auditor()
        auditor.workdir = os.path.realpath(workdir)
        auditor.install(torch)
        auditor.enforcing = True
        done = _compile_forward(candidate_file, job["entry_point"], loaded, GPUTarget(backend, int(arch), int(warp_size)),
                                CudaLauncher, init_args)
        return EXIT_DONE if done else EXIT_PARTIAL
    except BaseException:  # noqa: BLE001 - any failure only means "compile in the first call"
        return EXIT_FAILED


def _compile_forward(candidate_file: str, entry_point: str, loaded: Any, target: Any, launcher_cls: Any,
                     init_args: Any) -> bool:
    """ModelNew's forward on meta tensors, every launch a compile and its launcher's build.
    True when the whole forward ran."""
    import gc

    import torch
    from triton.runtime import autotuner
    from triton.runtime import driver
    from triton.runtime.jit import JITFunction

    from drkernel.env.worker import import_file

    driver.set_active(CompileOnlyDriver(target))
    run = JITFunction.run
    built: set[int] = set()

    def compile_only(self: Any, *args: Any, grid: Any, warmup: bool, **kwargs: Any) -> Any:
        kernel = run(self, *args, grid=grid, warmup=True, **kwargs)
        if kernel is not None and launcher_cls is not None and id(kernel) not in built:
            built.add(id(kernel))
            try:
                launcher_cls(kernel.src, kernel.metadata)
            except Exception:  # noqa: BLE001 - built at the first launch instead
                pass
        return kernel

    JITFunction.run = compile_only
    import triton

    triton.knobs.autotuning.cache = False  # the benchmarker times nothing: no autotune result is kept
    module = import_file(candidate_file)
    for obj in gc.get_objects():  # ... not even one that asked for it
        if isinstance(obj, autotuner.Autotuner):
            obj.cache_results = False
    cls = getattr(module, f"{entry_point}New")
    args, kwargs = init_args
    meta = lambda x: x.to("meta") if isinstance(x, torch.Tensor) else x  # noqa: E731
    with torch.device("meta"):
        model = cls(*[meta(a) for a in args], **{k: meta(v) for k, v in kwargs.items()})
        inputs = [meta(x) for x in loaded.module.get_inputs()]
    with torch.no_grad():
        model(*inputs)
    return True


__all__ = ["job", "cuda_target", "await_compiler", "kill_group", "compile_main", "CompileOnlyDriver"]
