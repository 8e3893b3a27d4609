"""The candidate's process: ``python -m drkernel.env.worker FD WORKDIR``.

Spawned fresh for every evaluation by :mod:`drkernel.env.sandbox`. It imports torch and triton,
records the identities of the functions the harness relies on, installs the launch recorder, and
only then imports the candidate. It answers JSON requests from the grader on socket ``FD``;
tensors travel as raw files in ``WORKDIR`` (see :mod:`drkernel.env.tensor_io`).

Requests (``op``): ``load``, ``run`` (one checked call), ``time`` (interleaved timing of reference
and candidate), ``profile`` (coverage), ``exit``. Every reply carries ``tampered``: the harness
functions whose identity changed since start-up (a hack: ``harness_tampered``).

Nothing here decides correctness: the grader compares outputs in its own process.
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
        torch.set_num_threads(int(os.environ.get("DRKERNEL_WORKER_THREADS", "1")))
        from drkernel.env.launches import LaunchRecorder
        from drkernel.env import tensor_io

        self.tensor_io = tensor_io
        self.recorder = LaunchRecorder()
        self.recorder.install()
        self._snapshot = self._identities()
        self.device = "cpu"
        self.model = None
        self.reference = None
        self.ref_module = None
        self.candidate_file: str | None = None
        self.entry_point = "Model"

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
    def op_load(self, msg: dict[str, Any]) -> dict[str, Any]:
        torch = self.torch
        self.device = msg["device"]
        self.entry_point = msg.get("entry_point", "Model")
        os.environ["DRKERNEL_TASK_SIZE"] = msg["task_size"]
        if self.device.startswith("cuda"):
            dev = torch.device(self.device)
            torch.cuda.set_device(dev.index if dev.index is not None else torch.cuda.current_device())
        # The reference (trusted) first, under a name the candidate cannot guess.
        ref_source = Path(msg["task_file"]).read_text()
        import types

        self.ref_module = types.ModuleType(f"_ref_{os.urandom(8).hex()}")
        exec(compile(ref_source, msg["task_file"], "exec"), self.ref_module.__dict__)  # noqa: S102
        init = self.tensor_io.decode_args(msg["init"], self.workdir)
        from drkernel.env.task import split_init_inputs

        args, kwargs = split_init_inputs(init)
        torch.manual_seed(msg["init_seed"])
        self.reference = getattr(self.ref_module, self.entry_point)(*args, **kwargs).to(self.device).eval()
        # The candidate, from its real file (Triton reads kernel source with inspect).
        self.candidate_file = str(Path(msg["candidate_file"]).resolve())
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
        torch.manual_seed(msg["init_seed"])
        try:
            model = cls(*[_clone(a) for a in args], **{k: _clone(v) for k, v in kwargs.items()})
            if not isinstance(model, torch.nn.Module):
                raise TypeError(f"{self.entry_point}New is not a torch.nn.Module")
            threads_delta = max(threading.active_count() - py_threads_before, _os_threads() - os_threads_before)
            self.model = model.to(self.device).eval()
        except BaseException as exc:  # noqa: BLE001
            raise CandidateError("compile", f"{self.entry_point}New(*get_init_inputs()) failed: "
                                 + _trim_traceback(exc, self.candidate_file)) from None
        if msg.get("reference_backend") == "torch_compile":
            self.reference = torch.compile(self.reference)
        return {"ok": True, "threads_delta": threads_delta}

    def op_run(self, msg: dict[str, Any]) -> dict[str, Any]:
        torch = self.torch
        inputs = self.tensor_io.decode_args(msg["inputs"], self.workdir, self.device)
        tensors = [t for t in inputs if isinstance(t, torch.Tensor)]
        pristine = [t.clone() for t in tensors]
        self._prefill(int(msg.get("prefill_bytes", 0)), msg.get("prefill", "nan"))
        threads_before = threading.active_count()
        os_threads_before = _os_threads()
        self.recorder.reset()
        self.sync()
        t0 = _perf()
        try:
            with self._grad_ctx(msg.get("grad_mode", "no_grad")):
                out = self.model(*inputs)
            self.sync()
        except BaseException as exc:  # noqa: BLE001
            raise CandidateError("correctness", "ModelNew.forward raised: "
                                 + _trim_traceback(exc, self.candidate_file)) from None
        call_s = _perf() - t0
        reply: dict[str, Any] = {
            "ok": True, "launches": dict(self.recorder.counts), "launch_s": self.recorder.seconds,
            "call_s": call_s, "threads_delta": threading.active_count() - threads_before,
            # Native threads may legitimately appear on the first call (CUDA, Triton, thread pools):
            # the grader ignores this number for the first checked call.
            "os_threads_delta": _os_threads() - os_threads_before,
        }
        from drkernel.env.compare import aliases, is_dense, lazy_output_reason

        if not isinstance(out, torch.Tensor):
            reply["not_tensor"] = f"forward returned {type(out).__name__}, expected a single torch.Tensor"
            return reply
        lazy = lazy_output_reason(out, self.device)
        if lazy:
            reply["lazy"] = lazy
            return reply
        reply["aliases_input"] = aliases(out, tensors)
        reply["dense"] = is_dense(out)
        reply["mutated"] = [i for i, (a, b) in enumerate(zip(tensors, pristine)) if not _same_bits(a, b)]
        reply["out"] = self.tensor_io.write_tensor(out, self.workdir, msg.get("out_name", "out"))
        return reply

    def op_time(self, msg: dict[str, Any]) -> dict[str, Any]:
        """Interleaved timing of reference and candidate on fresh inputs; see drkernel.env.timing."""
        from drkernel.env.timing import time_interleaved

        return time_interleaved(self, msg)

    def op_profile(self, msg: dict[str, Any]) -> dict[str, Any]:
        from drkernel.env.profiling import measure_coverage

        # torch.profiler legitimately swaps some entry points while it records: check for tampering
        # before it runs, then take a fresh snapshot so the profiler's own changes are not reported.
        before = self.tampered()
        reply = measure_coverage(self, msg)
        self._snapshot = self._identities()
        reply["tampered_before"] = before
        return reply

    def pool_inputs(self, seed: int) -> list[Any]:
        """``get_inputs()`` of the reference under ``seed``, moved to the device."""
        torch = self.torch
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            inputs = list(self.ref_module.get_inputs())
        return [x.to(self.device) if isinstance(x, torch.Tensor) else x for x in inputs]


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


def main(argv: list[str]) -> int:
    fd, workdir = int(argv[0]), argv[1]
    conn = Connection(fd)
    try:
        harness = Harness(workdir)
        conn.send_bytes(json.dumps({"ok": True, "ready": True, "pid": os.getpid()}).encode())
    except BaseException as exc:  # noqa: BLE001 - report, then exit: an environment failure
        conn.send_bytes(json.dumps({"ok": False, "environment": True,
                                    "error": f"{type(exc).__name__}: {exc}"}).encode())
        return 3
    dumps = json.dumps  # captured before the candidate can touch json
    while True:
        try:
            msg = json.loads(conn.recv_bytes())
        except EOFError:
            return 0
        op = msg.get("op")
        if op == "exit":
            conn.send_bytes(dumps({"ok": True}).encode())
            return 0
        try:
            reply = getattr(harness, f"op_{op}")(msg)
        except CandidateError as exc:
            reply = {"ok": False, "stage": exc.stage, "error": exc.message}
        except BaseException as exc:  # noqa: BLE001
            reply = {"ok": False, "stage": msg.get("stage", op),
                     "error": _trim_traceback(exc, harness.candidate_file)}
        reply["tampered"] = sorted(set(harness.tampered()) | set(reply.pop("tampered_before", [])))
        conn.send_bytes(dumps(reply, default=str).encode())


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
