"""Compiling a candidate's Triton kernels ahead, in a process that cannot reach the GPU.

A Triton kernel compiles when it is first launched: inside the first correctness call, 0.45 s of
that call on an H100 machine (0.55 s with 8 evaluations in flight; the other six calls took 0.014 s
together). Correctness calls run in the GPU gate's shared side (candidate code may launch GPU work
at any point of a call), so every timing queued meanwhile waited for the compiler: the first call
was the longest shared hold of an evaluation.

During the load, once the worker is confined and audited and **before the candidate is imported**,
:func:`fork_compiler` forks a *compiling child*. Nothing of the candidate has run in the worker yet
(no hook it could have set fires at that fork). The child

* asks to die with its parent, closes every descriptor it inherited (the protocol socket, the
  output stage, the GPU driver's device files) and confines itself again with no GPU device file
  (:func:`drkernel.env.confine.confine` with ``devices=False``; without Landlock it compiles nothing);
  torch refuses CUDA in a forked child besides. Whatever the candidate's code does there, it does
  without a GPU, a channel to the grader or the stage;
* points Triton at :class:`CompileOnlyDriver` (the parent's GPU target; no device, no stream, a
  benchmarker that times nothing, so an autotuner compiles every config, with its results never
  cached) and makes every launch a compile-only ``warmup`` run that also builds the kernel's
  launcher (the C stub Triton compiles per signature: 0.2 s of a first call whose kernel came from
  the cache);
* imports the candidate, builds ModelNew under the meta device and calls its forward on the task's
  ``get_inputs()`` drawn under the meta device. A forward that reads values (``.item()``), a model
  that needs CUDA, an error or the time limit only end the child early: what it did not reach
  compiles in the first call, as before.

Kernels compiled by the child land in the worker's Triton cache (its work directory) under the key
the first call computes (same source, kernel names, target and specialization: a meta tensor's
address is 0, aligned like every allocation), so the first call loads them instead of compiling.

The grader waits for the child (:func:`await_compiler`, up to ``EvalConfig.precompile_timeout_s``)
**after the load's reply, outside the GPU gate, while the worker is idle**: between requests the
worker runs nothing (its threads, signals and timers are the audit's), and the load ends with the
device synchronised, so nothing of the candidate's runs on the GPU then; the child has no GPU. The
child's pid comes from the worker and is trusted only after it is found in the worker's process
group. Nothing the child does decides a verdict (``details["precompile"]`` is diagnostics); it can
write into the worker's Triton cache, which the candidate's code in the worker can too.
"""

from __future__ import annotations

import os
import select
import signal
import time
from typing import Any

EXIT_DONE, EXIT_PARTIAL, EXIT_FAILED, EXIT_NO_LANDLOCK = 0, 1, 2, 3


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


def triton_target() -> tuple[Any, Any]:
    """(target, launcher class) of the current device's Triton driver (the worker's, taken before
    any candidate code runs)."""
    from triton.runtime import driver

    return driver.active.get_current_target(), driver.active.launcher_cls


def fork_compiler(h: Any, target: Any, launcher_cls: Any, init_args: tuple[list[Any], dict[str, Any]],
                  require_landlock: bool = True) -> int:
    """In the worker, confined and audited, before the candidate is imported: fork the compiling
    child and return its pid (the parent goes on with the load). ``h`` gives ``workdir``,
    ``candidate_file``, ``entry_point`` and ``loaded.module``; ``init_args`` are ModelNew's
    constructor arguments."""
    pid = os.fork()
    if pid == 0:
        _child(h, target, launcher_cls, init_args, require_landlock)  # never returns
    return pid


def await_compiler(pid: int, pgid: int, timeout_s: float) -> dict[str, Any]:
    """In the grader: wait at most ``timeout_s`` for the compiling child ``pid`` (as the worker
    reported it: it must be a member of the worker's process group ``pgid`` and not its leader),
    then kill it if it still runs. Returns ``{"finished", "seconds"}`` or ``{"reason"}``."""
    t0 = time.monotonic()
    if pid <= 0 or pid == pgid or _pgid_of(pid) != pgid:
        return {"finished": False, "seconds": 0.0, "reason": "no compiling child in the worker's process group"}
    finished = False
    try:
        fd = os.pidfd_open(pid)
    except (OSError, AttributeError):
        fd = None
    try:
        while not finished:
            left = t0 + timeout_s - time.monotonic()
            if left <= 0:
                break
            if fd is not None:
                finished = bool(select.select([fd], [], [], min(left, 0.5))[0])
            else:
                finished = _pgid_of(pid) != pgid or _state_of(pid) in ("Z", "X", None)
                if not finished:
                    time.sleep(min(left, 0.02))
    finally:
        if fd is not None:
            os.close(fd)
    if not finished and _pgid_of(pid) == pgid:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    out: dict[str, Any] = {"finished": finished, "seconds": round(time.monotonic() - t0, 4)}
    if not finished:
        out["reason"] = "time limit"
    return out


def _pgid_of(pid: int) -> int | None:
    from drkernel.env.sandbox import proc_stat  # the grader's side only (not loaded in a worker)

    f = proc_stat(pid)
    return int(f[2]) if f and len(f) > 2 else None


def _state_of(pid: int) -> str | None:
    from drkernel.env.sandbox import proc_stat

    f = proc_stat(pid)
    return f[0] if f else None


def _child(h: Any, target: Any, launcher_cls: Any, init_args: Any, require_landlock: bool) -> None:
    """The forked child (see the module docstring). Ends with ``os._exit``."""
    code = EXIT_FAILED
    try:
        import ctypes

        ctypes.CDLL(None).prctl(1, signal.SIGKILL, 0, 0, 0)  # PR_SET_PDEATHSIG: dies with the worker
        devnull = os.open(os.devnull, os.O_RDWR)
        for fd in (0, 1, 2):
            os.dup2(devnull, fd)  # no output reaches the grader's pipe
        os.closerange(3, 1 << 20)  # the protocol socket, the stage, the GPU's files: all of them
        from drkernel.env.confine import confine

        report = confine(str(h.workdir), extra_read=_cache_roots(), devices=False)
        if require_landlock and (not report.get("landlock") or report.get("reason")):
            code = EXIT_NO_LANDLOCK
        else:
            code = EXIT_DONE if _compile_forward(h, target, launcher_cls, init_args) else EXIT_PARTIAL
    except BaseException:  # noqa: BLE001 - any failure only means "compile in the first call"
        pass
    os._exit(code)


def _cache_roots() -> list[str]:
    from drkernel.env.triton_cache import SHARED_ENV

    shared = os.environ.get(SHARED_ENV)
    return [shared] if shared and os.path.isdir(shared) else []


def _compile_forward(h: Any, target: Any, launcher_cls: Any, init_args: Any) -> bool:
    """ModelNew's forward on meta tensors, every launch a compile and its launcher's build.
    True when the whole forward ran."""
    import gc

    import torch
    from triton.runtime import autotuner
    from triton.runtime import driver
    from triton.runtime.jit import JITFunction

    from drkernel.env.worker import import_file

    driver.set_active(CompileOnlyDriver(target))
    run = JITFunction.run  # whatever the worker installed: only the warm-up flag changes
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
    module = import_file(h.candidate_file)
    for obj in gc.get_objects():  # ... not even one that asked for it
        if isinstance(obj, autotuner.Autotuner):
            obj.cache_results = False
    cls = getattr(module, f"{h.entry_point}New")
    args, kwargs = init_args
    meta = lambda x: x.to("meta") if isinstance(x, torch.Tensor) else x  # noqa: E731
    with torch.device("meta"):
        model = cls(*[meta(a) for a in args], **{k: meta(v) for k, v in kwargs.items()})
        inputs = [meta(x) for x in h.loaded.module.get_inputs()]
    with torch.no_grad():
        model(*inputs)
    return True


__all__ = ["fork_compiler", "await_compiler", "triton_target", "CompileOnlyDriver"]
