"""Compiling a candidate's Triton kernels ahead, in a process that never had a GPU.

A Triton kernel compiles when it is first launched: inside the first correctness call, 0.45 s of
that call on an H100 machine (0.55 s with 8 evaluations in flight; the other six calls took 0.014 s
together). Correctness calls run in the GPU gate's shared side (candidate code may launch GPU work
at any point of a call), so every timing queued meanwhile waited for the compiler: the first call
was the longest shared hold of an evaluation.

**The compiler.** As soon as an evaluation has its worker (before the reference outputs and the
load, which it runs beside), the grader asks the worker's zygote
(:mod:`drkernel.env.process.zygote`: the preloaded template the worker itself was forked from, which never
initialised CUDA) to fork a compiler for the worker's work directory
(:meth:`drkernel.env.process.sandbox.CandidateProcess.start_compiler`). The compiler

* leads a process group of its own, made so by the zygote before it reports the pid (so the grader
  trusts a pid no candidate named), dies with the zygote (``PR_SET_PDEATHSIG``), runs at idle CPU
  priority (``SCHED_IDLE``: beside other evaluations' timings it only takes CPU time nobody else
  wants) under a CPU-time limit, holds no descriptor of the grader's (no protocol socket, output
  stage or output pipe) and never had a GPU: no device file was ever opened in it and none may be
  (:func:`drkernel.env.process.confine.confine` with ``devices=False``, so CUDA cannot start there either);
* takes the worker's private environment (:func:`drkernel.env.process.confine.enter_private_environment`:
  the same Triton cache directory and shared layer) and kernel names (the evaluation's suffix),
  confines itself as a worker does (Landlock as the kernel's ABI allows; seccomp keeps it and
  everything it starts in its process group) and installs the worker's audit
  (:class:`drkernel.env.guards.audit.Auditor`, enforcing) before the candidate is imported; without
  Landlock or the group fix it compiles nothing;
* points Triton at :class:`CompileOnlyDriver` (the GPU's target as the grader read it; no device,
  no stream, a benchmarker that times nothing, so an autotuner compiles every config, and no
  autotuner writes its fake timings to the cache) and makes every launch a compile-only ``warmup``
  run that also builds the kernel's launcher (the C stub Triton compiles per signature: 0.2 s of a
  first call whose kernel came from the cache);
* imports the candidate, builds ModelNew under the meta device and calls its forward on the task's
  ``get_inputs()`` moved to the meta device. A forward that reads values (``.item()``), a model
  that needs CUDA, an error or the time limit only end it early: what it did not reach compiles in
  the first call, as without it.

Kernels compiled there land in the worker's Triton cache under the key the first call computes
(same source, kernel names, target and specialization: a meta tensor's address is 0, aligned like
every allocation), so the first call loads them instead of compiling.

**The grader** counts the compiler's group's resident memory with the worker's from its start (the
worker's memory watcher: over the evaluation's limit together, the compiler is killed), waits for it
after the load's reply, outside the GPU gate, while the worker is idle with its device synchronised
(:meth:`Compiler.wait`, up to ``EvalConfig.precompile_timeout_s``), then kills the whole group
whatever it did (the zygote kills a compiler's group before reaping it, too). Its exit status comes
from the zygote. Nothing the compiler does decides a verdict (``details["precompile"]`` is
diagnostics): it can only write the worker's Triton cache and temporary directory (:data:`WRITABLE`),
which the candidate's code in the worker can too; the candidate's file, which the worker imports
after the compiler started, is read-only to it. It never runs beside its own evaluation's calls;
beside other evaluations' it runs at idle priority, on CPU only. The reference outputs are still
computed before any candidate code can reach the GPU.
"""

from __future__ import annotations

import os
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


PHASES_FILE = os.path.join("tmp", "precompile_phases.json")
"""The compiler's own timers of its phases, under the work directory (diagnostics: the candidate's
code runs there and could put anything at that path, a FIFO or a link included; the grader opens it
without blocking or following links and reads at most 4 KB of finite numbers)."""

#: The work directory's parts a compiler may write (it reads the rest: ``candidate.py`` is the file
#: the worker imports, and only the grader writes it).
WRITABLE = ("triton-cache", "tmp")


class Compiler:
    """The grader's handle on one compiler (:meth:`drkernel.env.process.sandbox.CandidateProcess.start_compiler`):
    its process group's memory (the worker's memory watcher adds it to the worker's), its kill, its
    wait."""

    def __init__(self, child: Any, workdir: str):
        self.child = child  # drkernel.env.process.zygote.ZygoteChild: its exit status comes from the zygote
        self.pgid = child.pid  # the zygote made it a group leader before reporting the pid
        self.workdir = workdir
        self.reason: str | None = None

    @property
    def running(self) -> bool:
        return self.child.poll() is None

    def pss_bytes(self) -> int:
        """Proportional resident bytes of its group (PSS: the pages it shares with the zygote and
        the worker count once between them, not once in each)."""
        from drkernel.env.process.procfs import group_pss_bytes

        return group_pss_bytes(self.pgid) if self.running else 0

    def kill(self, reason: str | None = None) -> None:
        """SIGKILL to its group while its leader lives (once the leader has ended, the zygote kills
        the group itself before reaping it, and the id may soon be another process's)."""
        if reason and self.reason is None and self.running:
            self.reason = reason
        if self.running and self.child.leader_alive():
            from drkernel.env.process.procfs import kill_group

            kill_group(self.pgid)

    def wait(self, timeout_s: float) -> dict[str, Any]:
        """Wait at most ``timeout_s`` for it to end, then kill its group. Returns ``{"finished",
        "complete", "exit", "seconds", "phases_s"}`` (+ ``"reason"`` when it did not complete)."""
        import subprocess

        t0 = time.monotonic()
        while self.running and self.reason is None:
            left = t0 + timeout_s - time.monotonic()
            if left <= 0:
                self.reason = "time limit"
                break
            try:
                self.child.wait(min(left, 0.05))
            except subprocess.TimeoutExpired:
                pass
        finished = self.reason is None
        self.kill()
        try:
            code: int | None = self.child.wait(5.0)
        except subprocess.TimeoutExpired:  # a member stuck in the kernel (e.g. flushing its files)
            code, self.reason = None, self.reason or "not reaped 5 s after SIGKILL"
        out: dict[str, Any] = {"finished": finished, "complete": finished and code == EXIT_DONE, "exit": code,
                               "seconds": round(time.monotonic() - t0, 4), "phases_s": self.phases()}
        if self.reason:
            out["reason"] = self.reason
        elif code == EXIT_UNCONFINED:
            out["reason"] = "the compiler could not confine itself (Landlock or seccomp unavailable)"
        elif code != EXIT_DONE:
            out["reason"] = "the forward stopped early (what it reached was compiled)"
        return out

    def phases(self) -> dict[str, float]:
        import json
        import math
        import stat

        try:
            fd = os.open(os.path.join(self.workdir, PHASES_FILE), os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW)
        except OSError:
            return {}
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                return {}
            raw = json.loads(os.read(fd, 4096))
            out = {str(k)[:40]: float(v) for k, v in list(raw.items())[:16]}
            return {k: round(v, 4) for k, v in out.items() if math.isfinite(v) and 0 <= v < 1e6}
        except Exception:  # noqa: BLE001 - cut short or forged: no phases
            return {}
        finally:
            os.close(fd)


def compile_main(workdir: str, job: dict[str, Any]) -> int:
    """The compiler process (forked by the zygote, its own process group; see the module docstring).
    Returns its exit code: EXIT_DONE when the whole forward ran, EXIT_PARTIAL / EXIT_FAILED when it
    stopped early, EXIT_UNCONFINED when it could not confine itself."""
    import json
    import resource

    from drkernel.env.process.loading import laps

    phases: dict[str, float] = {}
    t0 = time.perf_counter()
    timed = laps(phases)

    def lap(name: str) -> None:  # the worker's laps, with the total so far, written where the grader reads
        timed(name)
        phases["total"] = round(time.perf_counter() - t0, 6)
        try:
            with open(os.path.join(workdir, PHASES_FILE), "w") as fh:  # (tmp exists: enter_private_environment)
                json.dump(phases, fh)
        except OSError:
            pass

    try:  # idle priority: beside other evaluations' timings it takes only CPU time nobody else wants
        # (an H100 machine graded as fast with it as at normal priority: 66.3 vs 66.0 a minute)
        os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
    except (OSError, AttributeError):
        os.nice(19)
    resource.setrlimit(resource.RLIMIT_CPU, (job["cpu_s"], job["cpu_s"]))
    try:
        from pathlib import Path

        import torch
        from triton.backends.compiler import GPUTarget

        from drkernel.env.guards.audit import Auditor
        from drkernel.env.process.confine import confine, enter_private_environment
        from drkernel.env.measure.launches import install_naming
        from drkernel.env.tasks.task import Task, split_init_inputs

        backend, arch, warp_size = job["target"]
        if backend != "cuda":
            return EXIT_FAILED
        from triton.backends.nvidia.driver import CudaLauncher

        loaded = Task.from_source(job["task_source"], name=job["task_name"],
                                  entry_point=job["entry_point"]).load(job["task_size"])
        init_args = split_init_inputs(loaded.init_inputs(job["init_seed"]))
        lap("task")
        os.environ["DRKERNEL_TASK_SIZE"] = job["task_size"]  # as the worker's (worker.op_load)
        shared = enter_private_environment(workdir)  # as the worker's: the same Triton cache
        candidate_file = str(Path(job["candidate_file"]).resolve())
        install_naming(candidate_file, job["kernel_suffix"])
        report = confine(workdir, extra_read=[shared] if shared else None, devices=False,
                         writable=[os.path.join(workdir, d) for d in WRITABLE])
        if not report.get("landlock") or report.get("reason") or not report["process_group"].startswith("fixed"):
            return EXIT_UNCONFINED
        auditor = Auditor()
        auditor.workdir = os.path.realpath(workdir)
        auditor.install(torch)
        auditor.enforcing = True
        lap("confine")
        done = _compile_forward(candidate_file, job["entry_point"], loaded,
                                GPUTarget(backend, int(arch), int(warp_size)), CudaLauncher, init_args, lap)
        return EXIT_DONE if done else EXIT_PARTIAL
    except BaseException:  # noqa: BLE001 - any failure only means "compile in the first call"
        return EXIT_FAILED


def _compile_forward(candidate_file: str, entry_point: str, loaded: Any, target: Any, launcher_cls: Any,
                     init_args: Any, lap: Any) -> bool:
    """ModelNew's forward on meta tensors, every launch a compile and its launcher's build.
    True when the whole forward ran."""
    import torch
    from triton.runtime import autotuner
    from triton.runtime import driver
    from triton.runtime.jit import JITFunction

    from drkernel.env.process.loading import import_file

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

    def no_disk_cache(self: Any, tuning_key: Any, configs: Any, bench_fn: Any) -> bool:
        bench_fn()  # compiles every config; the timings are fake: nothing is written for the worker to read
        return False

    JITFunction.run = compile_only
    autotuner.Autotuner.check_disk_cache = no_disk_cache  # every autotuner, whenever it is built
    module = import_file(candidate_file)
    lap("import")
    cls = getattr(module, f"{entry_point}New")
    args, kwargs = init_args
    meta = lambda x: x.to("meta") if isinstance(x, torch.Tensor) else x  # noqa: E731
    with torch.device("meta"):
        model = cls(*[meta(a) for a in args], **{k: meta(v) for k, v in kwargs.items()}).eval()
        inputs = [meta(x) for x in loaded.module.get_inputs()]
    lap("build")
    with torch.no_grad():
        model(*inputs)
    lap("forward")
    return True


__all__ = ["job", "cuda_target", "Compiler", "compile_main", "CompileOnlyDriver"]
