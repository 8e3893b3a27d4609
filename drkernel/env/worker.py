"""The candidate's process: ``python -m drkernel.env.worker FD WORKDIR``.

Started ahead of time by :mod:`drkernel.env.sandbox` (a *warm* spare): it imports torch and
triton, creates the CUDA context when it serves a GPU, records the identities of the functions the
harness relies on, installs the launch recorder, and says hello. It then serves exactly one
candidate and exits. It speaks :mod:`drkernel.env.protocol` on socket ``FD``; candidate outputs go
back as raw files in ``WORKDIR`` (see :mod:`drkernel.env.tensor_io`).

Inputs are drawn here, from the hidden seed in the request that uses them, with the grader's own
code (:meth:`LoadedTask.draw_inputs`), so the grader draws the same bits without shipping tensors.
Every reply carries ``tampered``: the harness functions whose identity changed since start-up
(a hack: ``harness_tampered``). Nothing here decides correctness: the grader compares outputs.

Faults: everything that fails after the candidate was imported is the candidate's (its code runs
in this process and may have provoked it), at the stage of the request: load -> compile, run ->
correctness, time -> timing, profile -> profiling. A failure before that is the harness's.
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys
import threading
import time
import traceback
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

_perf = time.perf_counter
_MAX_ERR = 2000


def _trim_traceback(exc: BaseException, candidate_file: str | None) -> str:
    """The exception and the candidate's own frames, not the harness's."""
    tb = traceback.extract_tb(exc.__traceback__)
    frames = [f for f in tb if candidate_file and f.filename == candidate_file]
    lines = [f"  line {f.lineno}, in {f.name}: {f.line}" for f in frames[-4:]]
    msg = f"{type(exc).__name__}: {exc}"
    if len(msg) > _MAX_ERR:
        msg = msg[:_MAX_ERR // 2] + " ... " + msg[-_MAX_ERR // 2:]
    return "\n".join(lines + [msg]) if lines else msg


class CandidateError(Exception):
    def __init__(self, stage: str, message: str):
        super().__init__(message)
        self.stage = stage
        self.message = message


class Harness:
    def __init__(self, workdir: str):
        import torch

        self.torch = torch
        self.workdir = Path(workdir)
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
        torch.set_float32_matmul_precision("highest")
        torch.set_num_threads(1)
        from drkernel.env.launches import LaunchRecorder
        from drkernel.env import tensor_io

        self.tensor_io = tensor_io
        self.recorder = LaunchRecorder()
        self.recorder.install()
        self._snapshot = self._identities()
        self.device = "cpu"
        self.model = None
        self.reference = None
        self.tampered_before: list[str] = []
        self.loaded = None  # LoadedTask: the reference's module, inputs drawn from seeds
        self.candidate_file: str | None = None
        self.entry_point = "Model"
        self.budget = None  # LaunchBudget on CUDA (drkernel.env.budget), compiled before the candidate loads
        self.budget_error: str | None = None

    def build_budget(self) -> None:
        """Compile the timing's launch budget (CUDA only; verified on first use); a failure turns it off,
        with the reason."""
        try:
            from drkernel.env.budget import LaunchBudget

            self.budget = LaunchBudget.prepare(self.torch, "cuda")
        except Exception as exc:  # noqa: BLE001 - timing then runs without the hold and says why
            self.budget, self.budget_error = None, f"launch budget unavailable: {type(exc).__name__}: {exc}"[:300]

    # -- tamper detection -------------------------------------------------------------------------
    def _identities(self) -> dict[str, Any]:
        torch = self.torch
        import triton

        names = {
            "time.perf_counter": time.perf_counter, "time.perf_counter_ns": time.perf_counter_ns,
            "time.time": time.time, "torch.allclose": torch.allclose, "torch.equal": torch.equal,
            "torch.isclose": torch.isclose, "torch.empty": torch.empty, "torch.manual_seed": torch.manual_seed,
            "torch.Tensor.clone": torch.Tensor.clone, "torch.Tensor.copy_": torch.Tensor.copy_,
            "torch.Tensor.to": torch.Tensor.to, "torch.Tensor.cpu": torch.Tensor.cpu,
            "torch.Tensor.contiguous": torch.Tensor.contiguous, "torch.Tensor.data_ptr": torch.Tensor.data_ptr,
            "torch.Tensor.untyped_storage": torch.Tensor.untyped_storage,
            "torch.Tensor.__torch_function__": torch.Tensor.__torch_function__,
            "torch.nn.Module.__call__": torch.nn.Module.__call__,
            "torch.cuda.synchronize": torch.cuda.synchronize, "torch.cuda.Event": torch.cuda.Event,
            "torch.cuda.Event.record": torch.cuda.Event.record,
            "torch.cuda.Event.elapsed_time": torch.cuda.Event.elapsed_time,
            "torch.cuda.current_stream": torch.cuda.current_stream,
            "torch.profiler.profile": torch.profiler.profile, "triton.jit": triton.jit,
            "threading.active_count": threading.active_count, "json.dumps": json.dumps,
        }
        budget = sys.modules.get("drkernel.env.budget")
        if budget is not None:
            names["drkernel.env.budget._launch"] = budget._launch
            names["drkernel.env.budget.LaunchBudget.hold"] = budget.LaunchBudget.hold
            names["drkernel.env.budget.LaunchBudget.verify"] = budget.LaunchBudget.verify
            names["drkernel.env.budget._probe"] = budget._probe
        return names

    def tampered(self) -> list[str]:
        now = self._identities()
        # ``==`` rather than ``is``: a classmethod is a new bound object on every access.
        bad = [k for k, v in self._snapshot.items() if not (now.get(k) is v or now.get(k) == v)]
        if not self.recorder.hooks_intact():
            bad.append("triton launch entry points")
        return bad

    # -- helpers ----------------------------------------------------------------------------------
    def sync(self) -> None:
        if self.device.startswith("cuda"):
            self.torch.cuda.synchronize()

    def _grad_ctx(self, mode: str):
        torch = self.torch
        return {"no_grad": torch.no_grad, "enable_grad": torch.enable_grad,
                "inference_mode": torch.inference_mode}[mode]()

    def _prefill(self, nbytes: int, pattern: str) -> None:
        """Leave freed memory filled with garbage so unwritten outputs show up (Sakana-style reuse)."""
        if nbytes <= 0 or pattern == "none":
            return
        torch = self.torch
        n = max(nbytes // 4, 1)
        value = float("nan") if pattern == "nan" else 1.2345e30
        blocks = [torch.empty(n, dtype=torch.float32, device=self.device).fill_(value) for _ in range(4)]
        self.sync()
        del blocks

    # -- ops --------------------------------------------------------------------------------------
    def op_load(self, req: Any) -> Any:
        from drkernel.env.protocol import Failure, LoadReply
        from drkernel.env.task import SeededRandom, Task, TaskError, split_init_inputs

        torch = self.torch
        t0 = _perf()
        self.device = req.device
        self.entry_point = req.entry_point
        os.environ["DRKERNEL_TASK_SIZE"] = req.task_size  # this process's own environment (one thread)
        # The reference (trusted) first, before any candidate code runs.
        try:
            if self.device.startswith("cuda"):
                dev = torch.device(self.device)
                torch.cuda.set_device(dev.index if dev.index is not None else torch.cuda.current_device())
            self.loaded = Task.from_source(req.task_source, name=req.task_name,
                                           entry_point=req.entry_point).load(req.task_size)
            init = self.loaded.init_inputs(req.init_seed)
            self.reference = self.loaded.build_model(init, req.init_seed, self.device)
        except (TaskError, Exception) as exc:  # noqa: BLE001 - the grader loaded it fine: the harness broke
            return Failure(stage="compile", error=f"worker could not build the reference: {type(exc).__name__}: {exc}",
                           fault="harness")
        args, kwargs = split_init_inputs(init)
        # The candidate, from its real file (Triton reads kernel source with inspect).
        self.candidate_file = str(Path(req.candidate_file).resolve())
        self.recorder.own_file = self.candidate_file
        name = f"_candidate_{os.urandom(8).hex()}"
        # The reference is built (and CUDA initialised) before this point, so threads that appear
        # while the candidate is imported and constructed are the candidate's.
        py_threads_before, os_threads_before = threading.active_count(), _os_threads()
        try:
            spec = importlib.util.spec_from_file_location(name, self.candidate_file)
            module = importlib.util.module_from_spec(spec)
            sys.modules[name] = module
            spec.loader.exec_module(module)
        except BaseException as exc:  # noqa: BLE001 - any failure of the candidate is a result
            raise CandidateError("compile", "importing the candidate failed: "
                                 + _trim_traceback(exc, self.candidate_file)) from None
        cls = getattr(module, f"{self.entry_point}New", None)
        if cls is None or not isinstance(cls, type):
            raise CandidateError("compile", f"the candidate defines no class {self.entry_point}New")
        try:
            with SeededRandom(req.init_seed):  # the reference's init stream: identical weights
                model = cls(*[_clone(a) for a in args], **{k: _clone(v) for k, v in kwargs.items()})
            if not isinstance(model, torch.nn.Module):
                raise TypeError(f"{self.entry_point}New is not a torch.nn.Module")
            threads_delta = max(threading.active_count() - py_threads_before, _os_threads() - os_threads_before)
            self.model = model.to(self.device).eval()
        except BaseException as exc:  # noqa: BLE001
            raise CandidateError("compile", f"{self.entry_point}New(*get_init_inputs()) failed: "
                                 + _trim_traceback(exc, self.candidate_file)) from None
        if req.reference_backend == "torch_compile":
            self.reference = torch.compile(self.reference)
        return LoadReply(threads_delta=threads_delta, load_s=_perf() - t0)

    def op_run(self, req: Any) -> Any:
        from drkernel.env.protocol import RunReply

        torch = self.torch
        t0 = _perf()
        inputs = self.pool_inputs(req.seed, req.distribution)
        draw_s = _perf() - t0
        tensors = [t for t in inputs if isinstance(t, torch.Tensor)]
        pristine = [t.clone() for t in tensors]
        self._prefill(int(req.prefill_bytes), req.prefill)
        threads_before = threading.active_count()
        os_threads_before = _os_threads()
        self.recorder.reset()
        self.sync()
        t0 = _perf()
        try:
            with self._grad_ctx(req.grad_mode):
                out = self.model(*inputs)
            self.sync()
        except BaseException as exc:  # noqa: BLE001
            raise CandidateError("correctness", "ModelNew.forward raised: "
                                 + _trim_traceback(exc, self.candidate_file)) from None
        reply = RunReply(
            launches=dict(self.recorder.counts), launch_s=self.recorder.seconds, call_s=_perf() - t0,
            threads_delta=threading.active_count() - threads_before,
            # Native threads may legitimately appear on the first call (CUDA, Triton, thread pools):
            # the grader ignores this number for the first checked call.
            os_threads_delta=_os_threads() - os_threads_before, draw_s=draw_s)
        from drkernel.env.compare import aliases, is_dense, lazy_output_reason

        if not isinstance(out, torch.Tensor):
            reply.not_tensor = f"forward returned {type(out).__name__}, expected a single torch.Tensor"
            return reply
        lazy = lazy_output_reason(out, self.device)
        if lazy:
            reply.lazy = lazy
            return reply
        reply.aliases_input = aliases(out, tensors)
        reply.dense = is_dense(out)
        reply.mutated = [i for i, (a, b) in enumerate(zip(tensors, pristine)) if not _same_bits(a, b)]
        t0 = _perf()
        reply.out = self.tensor_io.write_tensor(out, self.workdir, req.out_name)
        reply.write_s = _perf() - t0
        return reply

    def op_time(self, req: Any) -> Any:
        """Interleaved timing of reference and candidate on fresh inputs; see drkernel.env.timing."""
        from drkernel.env.timing import time_interleaved

        return time_interleaved(self, req)

    def op_profile(self, req: Any) -> Any:
        from drkernel.env.profiling import measure_coverage

        # torch.profiler legitimately swaps some entry points while it records: check for tampering
        # before it runs, then take a fresh snapshot so the profiler's own changes are not reported.
        before = self.tampered()
        reply = measure_coverage(self, req)
        self._snapshot = self._identities()
        self.tampered_before = before
        return reply

    def pool_inputs(self, seed: int, distribution: str = "native") -> list[Any]:
        """The reference task's inputs for ``seed`` on this device (the grader draws the same)."""
        return self.loaded.draw_inputs(seed, distribution, self.device)


def _os_threads() -> int:
    """Threads of this process as the kernel sees them (``_thread`` and native threads included)."""
    try:
        return len(os.listdir("/proc/self/task"))
    except OSError:
        return threading.active_count()


def _clone(x: Any) -> Any:
    import torch

    return x.clone() if isinstance(x, torch.Tensor) else x


def _same_bits(a: Any, b: Any) -> bool:
    import torch

    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    if a.is_floating_point():
        return bool(torch.equal(torch.nan_to_num(a, nan=0.0), torch.nan_to_num(b, nan=0.0))
                    and torch.equal(torch.isnan(a), torch.isnan(b)))
    return bool(torch.equal(a, b))


#: Stage a failure of each request is reported at.
OP_STAGES = {"load": "compile", "run": "correctness", "time": "timing", "profile": "profiling"}


def main(argv: list[str]) -> int:
    t_start = _perf()
    fd, workdir = int(argv[0]), argv[1]
    conn = Connection(fd)
    from drkernel.env import protocol as P

    device = os.environ.get("DRKERNEL_WORKER_DEVICE", "cpu")
    try:
        harness = Harness(workdir)
        if device.startswith("cuda"):  # the CUDA context: part of the warm start
            harness.torch.cuda.init()
            harness.torch.empty(1, device="cuda")
            harness.build_budget()
        from torch.profiler import ProfilerActivity, profile

        acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.startswith("cuda") else [])
        with profile(activities=acts):  # the profiler's one-time start-up cost (CUPTI on CUDA), ahead
            harness.torch.empty(1, device="cuda" if device.startswith("cuda") else "cpu")
        harness._snapshot = harness._identities()  # after the profiler's own changes
        import drkernel.env.compare  # noqa: F401 - imported ahead of the candidate, like everything used later
        import drkernel.env.profiling  # noqa: F401
        import drkernel.env.task  # noqa: F401
        import drkernel.env.timing  # noqa: F401
        conn.send_bytes(P.encode_reply(P.Hello(ready=True, pid=os.getpid(), device=device,
                                               start_s=_perf() - t_start)))
    except BaseException as exc:  # noqa: BLE001 - report, then exit: an environment failure
        conn.send_bytes(P.encode_reply(P.Failure(stage="compile", error=f"{type(exc).__name__}: {exc}",
                                                 fault="harness")))
        return 3
    send, encode = conn.send_bytes, P.encode_reply  # captured before the candidate can touch them
    while True:
        try:
            raw = conn.recv_bytes()
        except EOFError:
            return 0
        try:
            req = P.decode_request(raw)
        except P.ProtocolError as exc:
            send(encode(P.Failure(stage="compile", error=f"bad request: {exc}", fault="harness")))
            return 4
        if req.op == "exit":
            return 0
        stage = OP_STAGES[req.op]
        harness.tampered_before = []
        try:
            reply = getattr(harness, f"op_{req.op}")(req)
        except CandidateError as exc:
            reply = P.Failure(stage=exc.stage, error=exc.message, fault="candidate")
        except BaseException as exc:  # noqa: BLE001 - after the candidate loaded, its process is its own
            fault = "candidate" if harness.candidate_file is not None else "harness"
            reply = P.Failure(stage=stage, error=_trim_traceback(exc, harness.candidate_file), fault=fault)
        send(encode(reply, sorted(set(harness.tampered()) | set(harness.tampered_before))))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
