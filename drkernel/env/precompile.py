"""Compiling a candidate's Triton kernels ahead, in a process that cannot reach the GPU.

A Triton kernel compiles when it is first launched: inside the first correctness call, 0.45 s of
that call on an H100 machine (0.55 s with 8 evaluations in flight; the other six calls took 0.014 s
together). Correctness calls run in the GPU gate's shared side (candidate code may launch GPU work
at any point of a call), so every timing queued meanwhile waited for the compiler: the first call
was the longest shared hold of an evaluation.

:func:`precompile` (the worker's ``precompile`` request, which the grader sends *outside* the gate)
forks a child of the loaded worker and waits for it. The child

* closes every descriptor it inherited (the protocol socket, the output stage, the GPU driver's
  device files), and, where Landlock is available, confines itself again with no GPU device file
  (:func:`drkernel.env.confine.confine` with ``devices=False``); torch refuses CUDA in a forked
  child besides. Whatever the candidate's code does there, it does without a GPU;
* points Triton at :class:`CompileOnlyDriver` (the parent's GPU target; no device, no stream, a
  benchmarker that times nothing, so an autotuner compiles every config) and makes every launch a
  compile-only ``warmup`` run, building the kernel's launcher too (a C stub Triton compiles per
  signature; 0.2 s of the first call once the kernel itself came from the cache);
* calls ModelNew's forward on meta tensors: its parameters and buffers as meta tensors of their
  shapes (``torch.func.functional_call``), the task's ``get_inputs()`` under the meta device. A
  forward that reads values (``.item()``), a task input that needs CUDA, an error or the time limit
  ends the child early: the kernels it did not reach compile in the first call, as before.

Kernels compiled by the child land in the worker's Triton cache (its work directory), with the
same key the first call computes (same source, kernel names, target and specialization: a meta
tensor's address is 0, aligned like every allocation), so the first call loads them instead of
compiling. The parent runs no candidate code meanwhile: it forks, reads the child's report and
waits, with the garbage collector off (no finaliser of the candidate's runs). Nothing the child
reports decides anything: its report is diagnostics (``details["precompile"]``).

Trust: the child is the candidate's, as its worker is; it can write into the Triton cache, which
the candidate's code in the worker can too. It cannot reach the GPU, the grader's channel or the
output stage.
"""

from __future__ import annotations

import gc
import json
import os
import select
import signal
import time
from typing import Any

REPORT_BYTES = 4096


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


def precompile(h: Any, timeout_s: float, target: Any = None, launcher_cls: Any = None) -> dict[str, Any]:
    """In the worker (parent side): fork the compiling child, wait at most ``timeout_s`` for it.
    ``h`` gives ``workdir``, ``model`` and ``loaded.module`` (the task's); ``target`` and
    ``launcher_cls``: Triton's GPU target and launcher builder (default: the current device's).
    Returns ``{"complete", "kernels", "launchers", "seconds", "reason", "note"}``."""
    t0 = time.perf_counter()
    if target is None:
        try:
            from triton.runtime import driver

            target, launcher_cls = driver.active.get_current_target(), driver.active.launcher_cls
        except Exception as exc:  # noqa: BLE001
            return {"complete": False, "kernels": 0, "launchers": 0, "seconds": 0.0,
                    "reason": f"no Triton target: {type(exc).__name__}"}
    r, w = os.pipe()
    enabled = gc.isenabled()
    gc.disable()  # no finaliser of the candidate's objects runs in the parent meanwhile
    try:
        pid = os.fork()
        if pid == 0:  # the child: never returns
            os.close(r)
            _child(h, target, launcher_cls, w)
        os.close(w)
        report = _read_report(r, pid, t0 + timeout_s)
    finally:
        os.close(r)
        if enabled:
            gc.enable()
    report["seconds"] = round(time.perf_counter() - t0, 4)
    return report


def _read_report(r: int, pid: int, deadline: float) -> dict[str, Any]:
    buf = b""
    reason = None
    while len(buf) < REPORT_BYTES:
        left = deadline - time.perf_counter()
        if left <= 0:
            reason = "time limit"
            break
        ready, _, _ = select.select([r], [], [], left)
        if not ready:
            continue
        chunk = os.read(r, REPORT_BYTES - len(buf))
        if not chunk:
            break
        buf += chunk
    try:
        os.kill(pid, signal.SIGKILL)  # done or not: the child never outlives its report
    except ProcessLookupError:
        pass
    os.waitpid(pid, 0)
    try:
        data = json.loads(buf.decode("utf-8", "replace")) if buf else {}
    except ValueError:
        data = {}
    data = data if isinstance(data, dict) else {}
    counts = {k: data.get(k) if isinstance(data.get(k), int) and not isinstance(data.get(k), bool) else 0
              for k in ("kernels", "launchers")}
    err = data.get("error")
    if reason is None and not buf:
        reason = "the compiling process ended without a report"
    elif reason is None and isinstance(err, str):
        reason = err[:300]
    note = data.get("note")
    return {"complete": reason is None, **counts, "reason": reason, "note": note[:300] if isinstance(note, str) else None}


def _child(h: Any, target: Any, launcher_cls: Any, w: int) -> None:
    """The forked child (see the module docstring). Ends with ``os._exit``."""
    code = 0
    report: dict[str, Any] = {"kernels": 0, "launchers": 0}
    try:
        devnull = os.open(os.devnull, os.O_RDWR)
        for fd in (0, 1, 2):
            os.dup2(devnull, fd)  # no output reaches the grader's pipe
        os.closerange(3, w)  # everything else inherited: the protocol socket, the stage, the GPU's files
        os.closerange(w + 1, 1 << 16)
        from drkernel.env.confine import confine

        confine(str(h.workdir), extra_read=_cache_roots(), devices=False)
        _compile_forward(h, target, launcher_cls, report)
    except BaseException as exc:  # noqa: BLE001 - any failure only means "compile in the first call"
        report["error"] = f"{type(exc).__name__}: {str(exc)[:200]}"
        code = 1
    try:
        os.write(w, json.dumps(report).encode()[:REPORT_BYTES])
    finally:
        os._exit(code)


def _cache_roots() -> list[str]:
    from drkernel.env.triton_cache import SHARED_ENV

    shared = os.environ.get(SHARED_ENV)
    return [shared] if shared and os.path.isdir(shared) else []


def _compile_forward(h: Any, target: Any, launcher_cls: Any, report: dict[str, Any]) -> None:
    """ModelNew's forward on meta tensors, every launch a compile (and its launcher's build: Triton
    compiles a C stub per signature, cached by its source, 0.2 s of an H100 machine's first call)."""
    import torch
    from triton.runtime import driver
    from triton.runtime.jit import JITFunction

    driver.set_active(CompileOnlyDriver(target))
    run = JITFunction.run  # whatever the worker installed: only the warm-up flag changes
    built: set[int] = set()

    def compile_only(self: Any, *args: Any, grid: Any, warmup: bool, **kwargs: Any) -> Any:
        kernel = run(self, *args, grid=grid, warmup=True, **kwargs)
        if kernel is not None:
            report["kernels"] += 1
            if launcher_cls is not None and id(kernel) not in built:
                built.add(id(kernel))
                try:
                    launcher_cls(kernel.src, kernel.metadata)
                    report["launchers"] += 1
                except Exception as exc:  # noqa: BLE001 - built at the first launch instead
                    report.setdefault("note", f"launcher not built: {type(exc).__name__}: {str(exc)[:160]}")
        return kernel

    JITFunction.run = compile_only
    model = h.model
    meta = {name: torch.empty(t.shape, dtype=t.dtype, device="meta")
            for name, t in [*model.named_parameters(), *model.named_buffers()]}
    with torch.device("meta"):
        inputs = h.loaded.module.get_inputs()
    inputs = [x.to("meta") if isinstance(x, torch.Tensor) else x for x in inputs]
    with torch.no_grad():
        try:
            torch.func.functional_call(model, meta, tuple(inputs))
        except BaseException:  # noqa: BLE001 - what compiled before the failure is kept
            if not report["kernels"]:
                raise


__all__ = ["precompile", "CompileOnlyDriver"]
