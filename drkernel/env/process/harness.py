"""One worker's state and what it does for each request: :class:`Harness`.

Runs in the candidate's process (:mod:`drkernel.env.process.worker` holds it in :func:`main`'s
frame). ``op_load`` loads the task and the candidate (confined, audited, sealed first), ``op_run``
makes one checked call, ``op_time`` the warm-up and timed calls
(:func:`drkernel.env.measure.timing.run_calls`), ``op_events`` hands back the device records.
Nothing here decides a verdict.
"""

from __future__ import annotations

import dataclasses
import os
import time
from collections import deque
from pathlib import Path
from typing import Any

from drkernel.env.faults import CandidateError, trim_traceback
from drkernel.env.process.loading import import_file, laps

_perf = time.perf_counter


def _mode_state(mode: Any) -> tuple[Any, type, dict[str, Any]]:
    """The dispatch mode, its class and its attributes, kept as the objects themselves (compared by
    identity: ``id()`` is an audit event, and a value's own ``==`` is the candidate's to define)."""
    return mode, type(mode), dict(vars(mode))


def _mode_changed(now: tuple[Any, type, dict[str, Any]], before: tuple[Any, type, dict[str, Any]] | None) -> bool:
    if before is None or not all(type(k) is str for k in now[2]):  # (no key of another type is hashed)
        return True
    return (now[0] is not before[0] or now[1] is not before[1] or now[2].keys() != before[2].keys()
            or any(now[2][k] is not v for k, v in before[2].items()))


def _no_seal(where: str) -> None:
    """The seal where there is none (a reference worker: no candidate code runs in it)."""


#: Library modules the seal watches (drkernel.env.guards.seal): the ones the draw of the next call's inputs
#: and the harness's checks look things up in (a rebinding there would see the next inputs).
SEALED_LIBRARIES = ("torch", "torch.nn.functional", "torch.functional", "torch.cuda", "torch.overrides",
                    "torch.utils._python_dispatch", "torch.autograd.grad_mode", "torch._tensor", "torch.utils._device",
                    "torch.cuda._utils", "torch._utils", "torch.random", "numpy", "numpy.random", "random", "math",
                    "operator", "functools", "itertools", "typing", "contextlib", "collections", "json", "json.encoder",
                    "json.decoder", "dataclasses", "copy", "multiprocessing.connection")


def _sealed_library_classes() -> list[type]:
    """Library classes whose methods the harness's steps between the calls run (the draw's mode and
    device context, the exit stack, the device guard, the recorder's counter, the channel's JSON):
    sealed too (drkernel.env.guards.seal). Those missing from this torch are skipped."""
    from drkernel.env.guards.audit import _resolve

    names = ("torch.overrides.TorchFunctionMode", "torch.utils._python_dispatch.TorchDispatchMode",
             "torch.utils._device.DeviceContext", "contextlib.ExitStack", "torch.cuda.device", "collections.Counter",
             "json.encoder.JSONEncoder", "json.decoder.JSONDecoder", "multiprocessing.connection.Connection",
             "torch.autograd.grad_mode.no_grad", "torch.autograd.grad_mode._DecoratorContextManager")
    return [c for c in (_resolve(n) for n in names) if isinstance(c, type)]


#: Bytes of earlier calls' inputs a worker keeps alive (:meth:`Harness._keep_alive`).
KEEP_BYTES = {"cuda": 1 << 30, "cpu": 512 << 20}


class Harness:
    """One worker's state. Lives only in :func:`main`'s frame: nothing module-level refers to it,
    and frames are out of the candidate's reach (:mod:`drkernel.env.guards.audit`)."""

    def __init__(self, workdir: str, device: str, fd: int, stage_fd: int | None = None,
                 seal_slot: list | None = None):
        import torch

        from drkernel.env.process import tensor_io
        from drkernel.env.guards.audit import Auditor
        from drkernel.env.judge.compare import type_name
        from drkernel.env.measure.launches import LaunchRecorder
        from drkernel.env.measure.timing import SpotChannel

        self.torch = torch
        self.workdir = Path(workdir)
        self.device = "cuda" if device.startswith("cuda") else "cpu"
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
        torch.set_float32_matmul_precision("highest")
        torch.set_num_threads(1)
        self.tensor_io = tensor_io
        self.recorder = LaunchRecorder()
        self.recorder.install()
        self.auditor = Auditor()
        self.spot = SpotChannel(fd)
        self.stage = None  # drkernel.env.process.staging.Stage: the shared output stage, mapped at load
        if stage_fd is not None:
            from drkernel.env.process.staging import Stage

            self.stage = Stage.attach(stage_fd)
        self.role = "candidate"
        self.model = None
        self.loaded = None  # LoadedTask: the task's module, inputs drawn from seeds
        self.candidate_file: str | None = None
        self.entry_point = "Model"
        self.budget = None  # LaunchBudget on CUDA (drkernel.env.measure.budget), compiled before the candidate loads
        self.budget_error: str | None = None
        self.fences = None
        self.start_parts: dict[str, float] = {}
        self.flush = None
        self.reset_l2 = None
        self.l2_reset_ok: bool | None = None
        self.timing_hold: tuple[Any, float] = (None, 0.0)
        self.profiler = None
        self.kineto = None
        self.guard = None
        self.mode = None
        self._mode_id: tuple | None = None
        self._foreign_read = None
        self._seen_records = 0
        self.findings: list[list[str]] = []
        self.isolation: dict[str, Any] = {}
        self.interpreted = None
        """The interpreter's ledger (drkernel.env.process.interpreter.install), on the CPU once installed."""
        self._interpreted_seen: dict[str, int] = {}
        self._budget_ms = 0.0
        self.params_reloadable_buffers = True
        self._params: list[Any] = []
        self._buffers: list[Any] = []
        self._kept: deque = deque()
        self._kept_bytes = 0
        self._initial: list[Any] = []
        self._init_args: tuple[list[Any], dict[str, Any]] | None = None  # the task's constructor arguments (load)
        self._prepared: Any = None  # a load's prepare part, done: its candidate part may follow (once)
        import gc

        # Automatic collection is off from the load on (:meth:`op_load`), and what the harness lets go
        # of waits here until the next call's window (:meth:`_release`); both bound before any
        # candidate code exists
        self._gc_disable, self._gc_collect = gc.disable, gc.collect
        self._trash: list[Any] = []
        self._arm = self._commit = self._captured = None  # drkernel.env.measure.capture, made at load
        self.seal_slot: list = seal_slot if seal_slot is not None else []
        """The seal's check (drkernel.env.guards.seal), put here at the candidate's load. A list the request
        loop also holds: read from it, the check is not looked up on a class the candidate reaches."""
        self._cuda_sync = getattr(torch._C, "_cuda_synchronize", None)  # the C function (no Python of torch's)
        # bound now, used between the calls where the candidate's rebindings must not reach
        self._tensor_type, self._param_type = torch.Tensor, torch.nn.Parameter
        self._set_grad, self._grad_enabled = torch._C._set_grad_enabled, torch._C.is_grad_enabled
        # a tensor's own attributes (its instance dictionary, read by the C descriptor): an entry
        # there shadows the method of that name (numel, stride, detach, copy_...) for the harness too
        self._instance_dict = torch.Tensor.__dict__["__dict__"].__get__
        self._type_name = type_name

    # -- warm start (no candidate yet) --------------------------------------------------------------
    def warm_cuda(self) -> None:
        """CUDA context, the launch budget, the fences, the flush buffer, the profiler's accessors."""
        torch = self.torch
        lap = laps(self.start_parts)
        torch.cuda.init()
        torch.empty(1, device="cuda")
        lap("cuda_context")
        try:
            from drkernel.env.measure.budget import Fences, LaunchBudget

            self.budget = LaunchBudget.prepare(torch, "cuda")
            lap("launch_budget")
            self.fences = Fences(torch, "cuda")
            lap("fences")
        except Exception as exc:  # noqa: BLE001 - timing then runs without the hold and says why
            self.budget, self.budget_error = None, f"launch budget unavailable: {type(exc).__name__}: {exc}"[:300]
            if self.fences is None:
                raise
        from drkernel.env.measure.profiling import kineto_accessors
        from drkernel.env.measure.timing import FLUSH_MIN_BYTES, persisting_l2_resetter

        l2 = torch.cuda.get_device_properties("cuda").L2_cache_size or (50 << 20)
        self.flush = torch.empty(max(2 * l2, FLUSH_MIN_BYTES) // 4, dtype=torch.float32, device="cuda")
        self.reset_l2 = persisting_l2_resetter()
        self.kineto = kineto_accessors(torch)
        lap("flush_l2_kineto")
        from torch.profiler import ProfilerActivity, profile

        with profile(activities=[ProfilerActivity.CUDA]):  # CUPTI's one-time start-up cost, ahead
            torch.empty(1, device="cuda")
        lap("cupti")

    def _warm_sampler(self) -> None:
        """The checked timed calls' sampler (drkernel.env.measure.spot) once, at load: CUDA loads a kernel's
        module on its first launch, and the sampler's kernels took ~0.1 s of the first checked call,
        inside the timing's exclusive hold of the GPU. Not at the worker's start: a spare starts
        beside other evaluations' timings, and a kernel another process launches then time-slices
        the GPU under them (an H100 fp32 matmul timed beside a process launching a tiny kernel every
        5 ms: p90 +11%). The load runs in the GPU gate's shared side.

        A warm-up only: if it fails (the device short of memory, say), the first checked call pays
        the load instead; nothing is charged to the candidate, whose file is named by then."""
        try:  # the spot channel's own snapshot: a sample of 2^10 of 2^12 elements (float32)
            self.spot.snapshot(self.torch.empty(1 << 12, dtype=self.torch.float32, device="cuda"), (0, 1 << 10))
        except Exception:  # noqa: BLE001 - see above
            pass

    # -- requests -----------------------------------------------------------------------------------
    def op_load(self, req: Any) -> Any:
        """The task, then (a candidate) the confinement and the candidate's module: in one request
        (``part`` ``all``) or two (``prepare``, then ``candidate``: see LoadRequest.part)."""
        from drkernel.env.protocol import Failure, LoadReply
        from drkernel.env.measure.capture import make_capture
        from drkernel.env.tasks.task import Task, TaskError, split_init_inputs

        torch = self.torch
        t0 = _perf()
        if req.part not in ("all", "prepare", "candidate") or (req.part != "all" and req.role != "candidate"):
            return Failure(stage="compile", error=f"a load's part {req.part!r} for role {req.role!r}", fault="harness")
        if req.part == "candidate":  # the same request as the prepare part's, which must have succeeded
            prepared, self._prepared = self._prepared, None
            if prepared is None or dataclasses.replace(prepared, part="candidate") != req:
                return Failure(stage="compile", error="a candidate's load that is not its prepare part's second half",
                               fault="harness")
            return self._load_candidate(req, t0, {})
        if self.loaded is not None:
            return Failure(stage="compile", error="a second load in one worker", fault="harness")
        self._gc_disable()  # for the rest of the process: see _release
        self._arm, self._commit, self._captured = make_capture(torch, self.device)
        self.role = req.role
        self.entry_point = req.entry_point
        os.environ["DRKERNEL_TASK_SIZE"] = req.task_size  # this process's own environment (one thread)
        try:  # the task (trusted): its inputs and constructor arguments
            self.loaded = Task.from_source(req.task_source, name=req.task_name,
                                           entry_point=req.entry_point).load(req.task_size)
            init = self.loaded.init_inputs(req.init_seed)
        except (TaskError, Exception) as exc:  # noqa: BLE001 - the grader loaded it fine: the harness broke
            return Failure(stage="compile", error=f"worker could not load the task: {type(exc).__name__}: {exc}",
                           fault="harness")
        if self.role == "reference":
            try:
                self.model = self.loaded.build_model(init, req.init_seed, self.device)
                self._keep_initial()
                if req.reference_backend == "torch_compile":
                    self.model = torch.compile(self.model)
            except Exception as exc:  # noqa: BLE001
                return Failure(stage="compile", error=f"the reference could not be built: {type(exc).__name__}: "
                               f"{exc}", fault="harness")
            self._start_measuring(req)
            return LoadReply(load_s=_perf() - t0)
        self._init_args = split_init_inputs(init)
        phases: dict[str, float] = {}
        lap = laps(phases)
        self.candidate_file = str(Path(req.candidate_file).resolve())
        self.recorder.own_file = self.candidate_file
        if self.stage is not None and req.stage_bytes:  # mapped and page-locked before any candidate code
            self.stage.reserve(req.stage_bytes, cuda=self.device == "cuda")
        lap("task_stage")
        if self.device == "cuda" and req.part == "all":
            self._warm_sampler()
            lap("sampler")
        self._start_measuring(req)  # the profiler starts before the process is confined
        lap("profiler")
        self._confine(req)
        lap("confine")
        if req.part == "prepare":
            self._prepared = req
            return LoadReply(load_s=_perf() - t0, isolation=self.isolation, phases_s=phases)
        return self._load_candidate(req, t0, phases)

    def _load_candidate(self, req: Any, t0: float, phases: dict[str, float]) -> Any:
        """The load's second part: the candidate's module imported and its model built (the grader
        holds the GPU gate's shared side: from here on the process may launch kernels)."""
        from drkernel.env.protocol import LoadReply
        from drkernel.env.tasks.task import SeededRandom, parameter_shapes

        torch = self.torch
        lap = laps(phases)
        args, kwargs = self._init_args
        if self.device == "cuda" and req.part == "candidate":
            self._warm_sampler()  # after the profiler's start: on the calls' stream, before their fences
            lap("sampler")
        seal = self.seal_slot[0]  # bound before any candidate code exists
        self.auditor.enforcing = True
        try:
            module = import_file(self.candidate_file)
        except BaseException as exc:  # noqa: BLE001 - any failure of the candidate is a result
            raise CandidateError("compile", "importing the candidate failed: "
                                 + trim_traceback(exc, self.candidate_file)) from None
        lap("import")
        cls = getattr(module, f"{self.entry_point}New", None)
        if cls is None or not isinstance(cls, type):
            raise CandidateError("compile", f"the candidate defines no class {self.entry_point}New")
        try:
            with SeededRandom(req.init_seed):  # the reference's init stream: identical weights
                model = cls(*[_clone(a) for a in args], **{k: _clone(v) for k, v in kwargs.items()})
            if not isinstance(model, torch.nn.Module):
                raise TypeError(f"{self.entry_point}New is not a torch.nn.Module")
            self.model = model.to(self.device).eval()
        except BaseException as exc:  # noqa: BLE001
            raise CandidateError("compile", f"{self.entry_point}New(*get_init_inputs()) failed: "
                                 + trim_traceback(exc, self.candidate_file)) from None
        lap("build")
        mine = parameter_shapes(self.model)
        want = (req.parameter_shapes, req.buffer_shapes)
        if mine[0] != want[0]:
            raise CandidateError("compile", (
                f"{self.entry_point}New's parameters do not mirror {self.entry_point}'s: the reference has "
                f"{_shapes(want[0])}, yours {_shapes(mine[0])}. Create the same parameters in the same order "
                "(e.g. the same nn modules); the grader loads fresh values into both between trials, so "
                "nothing may be derived from them in __init__."))
        self.params_reloadable_buffers = mine[1] == want[1]
        self._keep_initial()
        self.finish_request(full=True)
        seal("after the load")
        lap("fingerprint")
        return LoadReply(load_s=_perf() - t0, buffers_reloaded=self.params_reloadable_buffers,
                         isolation=self.isolation, phases_s=phases)

    def op_run(self, req: Any) -> Any:
        """One checked call on inputs ``draw_inputs(seed, distribution)``."""
        from drkernel.env.judge.compare import aliases, is_dense, lazy_output_reason
        from drkernel.env.protocol import RunReply

        torch = self.torch
        seal = self.seal_slot[0] if self.seal_slot else _no_seal  # at the request's start
        phases: dict[str, float] = {}
        lap = laps(phases)
        t0 = _perf()
        inputs = self.pool_inputs(req.seed, req.distribution)  # the task's code: torch's Python
        draw_s = _perf() - t0
        lap("inputs")
        seal("after the draw")
        self.reload(req.reload_seed)  # (a correctness call is not timed: what runs after this matters less)
        lap("reload")
        tensors = [t for t in inputs if isinstance(t, self._tensor_type)]
        pristine = [t.clone() for t in tensors]
        self._prefill(int(req.prefill_bytes), req.prefill)
        lap("prefill")
        try:
            out, call = self.call(inputs, req.grad_mode, timed=False)
        except CandidateError:
            raise
        except BaseException as exc:  # noqa: BLE001
            raise CandidateError("correctness", "ModelNew.forward raised: "
                                 + trim_traceback(exc, self.candidate_file)) from None
        self.discard(out)
        lap("call")  # (call() checked the seal last: nothing that can run the candidate's code since)
        reply = RunReply(launches=call["launches"], call_s=call["host_ms"] / 1e3, foreign=call["foreign"],
                         draw_s=draw_s, phases_s=phases, interpreter=self.interpreted_news("autotune"))
        kind = type(out)  # (never isinstance: it would read a __class__ property of the candidate's object)
        if kind is not self._tensor_type and not issubclass(kind, self._tensor_type):
            reply.not_tensor = f"forward returned {self._type_name(kind)}, expected a single torch.Tensor"
            return reply
        lazy = lazy_output_reason(out, self.device)
        if lazy:
            reply.lazy = lazy
            return reply
        reply.aliases_input = aliases(out, tensors)
        reply.dense = is_dense(out)
        reply.strides = [int(s) for s in out.stride()]
        reply.mutated = [i for i, (a, b) in enumerate(zip(tensors, pristine)) if not _same_bits(a, b)]
        seal("after the output's checks")
        lap("checks")
        t0 = _perf()
        reply.out = self.tensor_io.write_tensor(out, self.workdir, req.out_name, self.stage)
        reply.write_s = _perf() - t0
        lap("write")
        return reply

    def op_time(self, req: Any) -> Any:
        from drkernel.env.measure.timing import run_calls

        return run_calls(self, req)

    def op_events(self, req: Any) -> Any:
        """The device records so far: after a timing request that left them (``records`` False), or
        when no timing follows the correctness calls. The profiler stops here."""
        from drkernel.env.protocol import EventsReply

        self.finish_request(full=True)
        return EventsReply(events=self.stop_profiler() if self.device == "cuda" else [])

    # -- one call -------------------------------------------------------------------------------------
    def call(self, inputs: list[Any], grad_mode: str, timed: bool) -> tuple[Any, dict[str, Any]]:
        """Call the model once, the same way for every call (see :mod:`drkernel.env.measure.timing`)."""
        torch = self.torch
        cuda = self.device == "cuda"
        perf = _perf
        # bound before the window: after it, nothing is looked up until the output is copied
        arm, commit = self._arm, self._commit
        fence_end = self.fences.end if cuda else None
        seal = self.seal_slot[0] if self.seal_slot else _no_seal
        sync = self._cuda_sync
        t_pre = perf()
        self._keep_alive(inputs)
        t_kept = t_synced = perf()
        if cuda:
            hold, ms = self._hold()
            if self.reset_l2 is not None:
                ok = self.reset_l2()
                self.l2_reset_ok = ok if self.l2_reset_ok is None else (self.l2_reset_ok and ok)
            sync()
            t_synced = perf()
            self.flush.zero_()  # queued ahead of the call: the GPU is busy while the host launches
            if hold is not None:
                hold(ms)
            self.fences.begin()
        foreign_before = self._foreign_total()
        self.recorder.reset()
        tensor = self._tensor_type
        watched = [x for x in inputs if type(x) is tensor]  # (the harness drew them: exact tensors)
        grad = {"no_grad": torch.no_grad, "enable_grad": torch.enable_grad,
                "inference_mode": torch.inference_mode}[grad_mode]
        t0 = perf()
        if self.mode is not None:
            with grad(), self.mode:
                out = self.model(*inputs)
                self._release()
        else:
            with grad():
                out = self.model(*inputs)
                self._release()
        arm(out)  # still inside the window (drkernel.env.measure.capture)
        if cuda:  # inside the window (the device's clock is the kernels' records): first, before any lookup
            seal("after the forward")
        shadowed = self._shadowed(out, watched)  # before any method of theirs is called
        t1 = perf()
        if cuda:
            fence_end()
            commit()  # the output's bytes, queued right behind the closing fence
            t_after = perf()
        else:
            t_after = perf()
            commit()
            seal("after the forward")  # after the host clock stopped: not the candidate's time
        # The checks of what the call left behind. On CUDA they are host work done while the GPU
        # still runs the candidate's kernels behind the hold, before the sync, instead of after it
        # inside the GPU's exclusive hold (~0.3 ms a call). What of the candidate's could still run
        # after the check (a __del__ or a weakref callback, at a collection) could run after it in
        # the old order too (the spot round trip, the next inputs); threads and signals are refused;
        # the request's full check comes after all calls.
        self.after_call()
        seal("after the call's checks")  # they ran torch's Python: nothing of the harness's is used before this
        if shadowed:
            self._add("harness_tampered", shadowed)
            raise CandidateError("timing" if timed else "correctness", (
                f"{shadowed}: tensors the grader reads (the output, the inputs, the parameters) must keep "
                "torch's own class and methods"))
        t3 = perf()
        foreign, launches = self._foreign_total() - foreign_before, self.recorder.total()
        t4 = perf()
        if cuda:
            sync()
            host_s = (perf() - t0) - (t4 - t_after)
        else:  # the host clock times the call itself: the checks are not in it
            host_s = t_after - t0
        return out, {"host_ms": host_s * 1e3, "launch_ms": (t1 - t0) * 1e3, "foreign": foreign, "launches": launches,
                     "pre_ms": (t0 - t_pre) * 1e3, "after_ms": (t4 - t_after) * 1e3,
                     # the parts of pre_ms and after_ms (diagnostics: timing.CALL_PARTS)
                     "parts_ms": {"pre_keep": (t_kept - t_pre) * 1e3, "pre_sync": (t_synced - t_kept) * 1e3,
                                  "pre_queue": (t0 - t_synced) * 1e3, "after_guard": (t3 - t_after) * 1e3,
                                  "after_count": (t4 - t3) * 1e3}}

    def _shadowed(self, out: Any, inputs: list[Any]) -> str | None:
        """What of the call's tensors no longer answers with torch's own methods, or None: the
        output, the call's input tensors, the model's parameters and buffers must be of their
        exact class with no attribute of their own. An instance attribute (``out.numel = ...``,
        set without an audit event) or a reassigned ``__class__`` shadows the methods the harness
        calls on them after the call (reading the output's size and strides, checking inputs for
        mutation, reloading parameters): the candidate's code would run there, off the clock, and
        answer for the grader's checks. Only C-level reads here (``type``, the dictionary's
        descriptor)."""
        if self.role != "candidate":
            return None
        own, tensor = self._instance_dict, self._tensor_type
        if type(out) is tensor and own(out):
            return "the output carries attributes of its own"
        for t in inputs:
            if type(t) is not tensor or own(t):
                return "an input was given attributes or another class"
        for t in self._params:
            if type(t) is not self._param_type or own(t):
                return "a parameter was given attributes or another class"
        for t in self._buffers:
            if type(t) is not tensor or own(t):
                return "a buffer was given attributes or another class"
        return None

    def _keep_alive(self, inputs: list[Any]) -> None:
        """Earlier calls' inputs stay alive (up to :data:`KEEP_BYTES`, at least the last call's), so a
        call's inputs do not reuse their memory: a result cached under an input's address (with its
        shape and version counter) is not found again, whether or not the call is checked. Those let
        go of are freed in this call's window (:meth:`discard`)."""
        tensor = self._tensor_type
        nbytes = sum(t.numel() * t.element_size() for t in inputs if isinstance(t, tensor))
        self._kept.append((inputs, nbytes))
        self._kept_bytes += nbytes
        while len(self._kept) > 2 and self._kept_bytes > KEEP_BYTES[self.device]:
            old, n = self._kept.popleft()
            self.discard(old)
            self._kept_bytes -= n

    def captured(self, out: Any) -> Any:
        """The copy of ``out`` taken as the call's window closed (:mod:`drkernel.env.measure.capture`), or None."""
        try:
            return self._captured(out)
        except RuntimeError as exc:
            raise CandidateError("timing", str(exc)) from None

    def discard(self, obj: Any) -> None:
        """Let go of ``obj`` (a call's output, earlier inputs) in the next call's window, not now."""
        self._trash.append(obj)

    def _release(self) -> None:
        """Inside a call's window, after the forward returned: free what the harness let go of since
        the last call, and collect the two younger generations.

        The candidate's code may run whenever an object of its making is freed: ``__del__``, a
        weakref callback, a tensor's attribute holding either (inputs and outputs are tensors it
        can decorate). GPU work queued there outside every window would be free: a forward that
        returns an empty output and fills it from a finaliser run by the harness's next collection
        (or as the harness drops the output) times as nothing, and the filled output is correct
        when it is read. So automatic collection is off in the worker (:meth:`op_load`; the
        fingerprint reports it switched back on, and ``gc.enable``/``gc.set_threshold`` are refused
        to the candidate), the harness frees nothing of the candidate's between windows, and both
        happen here: whatever runs is timed as the call's (its device work lies between the
        fences; on the CPU the host clock and the dispatch mode see it). The two younger
        generations are collected (a cycle held by a call's output is freed in the next call's
        window); cycles that reach the oldest are never collected, and their finalisers never run
        (a worker lives for one evaluation)."""
        self._trash.clear()
        self._gc_collect(1)  # the young and the middle generations: a cycle freed one call late too

    def _hold(self) -> tuple[Any, float]:
        """The launch budget for every call (verified at load, see :meth:`_verify_budget`)."""
        return self.timing_hold

    def _verify_budget(self, verdict: dict[str, Any] | None = None, probe: bool = True) -> None:
        """At load, before the candidate's module: adopt the grader's probe of a hold of this shape
        (made while it held the GPU exclusively, :func:`drkernel.env.measure.budget.device_verdict`), else
        probe here, before the profiler starts, so the probe's side-stream kernel is not in the
        device records. The load runs in the GPU gate's shared section: no timing meanwhile, but
        other evaluations' kernels may time-slice the probe. ``probe`` False (a load's ``prepare``
        part, outside the gate): adopt or leave the hold off, with the reason."""
        if self.budget is None or self._budget_ms <= 0:
            return
        try:
            if not self.budget.adopt(verdict) and not probe and self.budget.verified is None:
                self.budget.verified, self.budget.reason = False, "the grader's probe did not fit this hold"
            if self.budget.verify(self.torch):  # probes only when nothing was adopted
                self.timing_hold = (self.budget.hold, self._budget_ms)
        except Exception as exc:  # noqa: BLE001 - a probe that fails turns the hold off, with the reason
            self.budget.verified, self.budget.reason = False, f"probe failed: {type(exc).__name__}: {exc}"[:300]

    def _keep_initial(self) -> None:
        """Remember the model's parameter (and buffer) tensors and their values as built, for
        :meth:`reload`: listed once, here, so a reload runs none of the candidate's code."""
        torch = self.torch
        params = list(self.model.parameters())
        buffers = list(self.model.buffers()) if self.params_reloadable_buffers else []
        if self.role == "candidate":  # (before any method of theirs is called: see _shadowed)
            own, name = self._instance_dict, self._type_name
            odd = sorted({name(type(t)) for t in params if type(t) is not torch.nn.Parameter}
                         | {name(type(t)) for t in buffers if type(t) is not torch.Tensor})
            if not odd and any(own(t) for t in params + buffers):
                odd = ["a tensor with attributes of its own"]
            if odd:
                raise CandidateError("compile", (
                    f"{self.entry_point}New's parameters must be plain torch.nn.Parameter objects and its buffers "
                    f"plain tensors (found {', '.join(odd)}): the grader loads fresh values into them between "
                    "calls, and that must not run any code of yours."))
        buffers = [b for b in buffers if b.is_floating_point()]
        self._params, self._buffers = params, buffers
        self._initial = [t.detach().clone() for t in params + buffers]

    def reload(self, seed: int | None) -> None:
        """The initial parameter values, transformed by ``seed`` when given
        (:func:`drkernel.env.tasks.task.reload_tensors`; the grader does the same to the reference)."""
        from drkernel.env.tasks.task import reload_tensors

        if not self._initial:
            return
        was = self._grad_enabled()  # (C functions: torch.no_grad's Python is looked up in torch's namespace)
        self._set_grad(False)
        try:
            for t, v in zip(self._params + self._buffers, self._initial):
                t.copy_(v)
            if seed is not None:
                reload_tensors(self._params, self._buffers, seed)
        finally:
            self._set_grad(was)

    def pool_inputs(self, seed: int, distribution: str = "native") -> list[Any]:
        """The task's inputs for ``seed`` on this device (the grader draws the same)."""
        return self.loaded.draw_inputs(seed, distribution, self.device)

    # -- integrity ------------------------------------------------------------------------------------
    def _confine(self, req: Any) -> None:
        """Confine the process, install the audit and the fingerprint, name the candidate's kernels."""
        from drkernel.env.guards.audit import StateGuard
        from drkernel.env.process.confine import confine, enter_private_environment
        from drkernel.env.guards.array_interfaces import disable_array_interfaces
        from drkernel.env.guards.audit import LAZY_REBINDS
        from drkernel.env.measure.launches import install_memory_fence, install_naming
        from drkernel.env.guards.seal import make_seal

        torch = self.torch
        if self.device == "cpu":
            from drkernel.env.process.interpreter import POLICY, install, interpreting

            if interpreting():  # before the fingerprint and the seal take their snapshots
                self.interpreted = install()
                self.isolation["interpreter"] = POLICY
        numpy_interfaces = disable_array_interfaces()  # raw memory through NumPy: before any candidate code
        shared_cache = enter_private_environment(str(self.workdir))
        install_naming(self.candidate_file, req.kernel_suffix)
        self.isolation = {**self.isolation, **confine(str(self.workdir),
                                                      extra_read=[shared_cache] if shared_cache else None)}
        self.auditor.workdir = os.path.realpath(str(self.workdir))
        self.auditor.install(torch)
        extra = ()
        if self.device == "cpu":
            install_memory_fence()
            self._install_foreign_mode()
            extra = (("ForeignWork", type(self.mode)),)
        self.guard = StateGuard(torch, extra_classes=extra)
        self.guard.snapshot()
        guards = list(self.auditor.guard_functions) + [fn for _, _, fn in self.recorder.installed]
        cells = [c for fn in guards for c in (getattr(fn, "__closure__", None) or ())]
        zero = [("the torch function mode stack", torch._C._len_torch_function_stack),
                ("the torch dispatch mode stack", torch._C._len_torch_dispatch_stack)]
        classes = [torch.Tensor, torch.nn.Parameter, *_sealed_library_classes()]
        classes += [type(self.mode)] if self.mode is not None else []
        self.seal_slot[:] = [make_seal(cells=cells, zero=zero, classes=classes,
                                       objects=[("the launch recorder", self.recorder)],
                                       libraries=SEALED_LIBRARIES, lazy=LAZY_REBINDS)]
        self.isolation["audit"] = ("python audit hook, thread/mode/conversion guards, state fingerprint, "
                                   "sealed harness namespaces")
        self.isolation["output_capture"] = getattr(self._captured, "status", "")
        self.isolation["numpy_array_interfaces"] = ("disabled" if numpy_interfaces["disabled"]
                                                    else f"NOT disabled: {numpy_interfaces['reason']}")

    def _install_foreign_mode(self) -> None:
        """The CPU dispatch mode that costs torch work outside the candidate's kernels."""
        from drkernel.env.guards.audit import innermost_actor, sealed
        from drkernel.env.measure.profiling import make_foreign_work

        auditor = self.auditor
        totals = {"cost": 0.0, "ops": {}}

        def classify(msg: Any) -> None:
            name, cost, frame = msg
            if self.role == "reference" or innermost_actor(auditor, frame) == "candidate":
                c = float(cost())
                if c > 0:
                    totals["cost"] += c
                    totals["ops"][name] = totals["ops"].get(name, 0) + 1

        self.mode = make_foreign_work(sealed(classify), bounded_only=self.role == "candidate")
        self._mode_id = _mode_state(self.mode)
        self._foreign_read = sealed(lambda _: (totals["cost"], dict(totals["ops"])))

    def _foreign_total(self) -> float:
        if self._foreign_read is None:
            return 0.0
        return float(self._foreign_read(None)[0])

    def foreign_ops(self) -> dict[str, int]:
        return dict(self._foreign_read(None)[1]) if self._foreign_read is not None else {}

    def _start_measuring(self, req: Any) -> None:
        """The reference's mode (CPU) and, on a GPU, the profiler: on before any model code runs."""
        self._budget_ms = float(req.launch_budget_ms)
        if self.role == "reference" and self.device == "cpu":
            self._install_foreign_mode()
        if self.device == "cuda":
            from torch.profiler import ProfilerActivity, profile

            self._verify_budget(req.launch_budget_verdict, probe=req.part == "all")
            self.profiler = profile(activities=[ProfilerActivity.CUDA])
            self.profiler.start()

    def stop_profiler(self) -> list[list[Any]]:
        """Stop the profiler and read its device records, through C functions captured at the
        worker's start only (drkernel.env.measure.profiling.kineto_accessors): torch's Python stop path
        looks things up in namespaces the candidate can rebind."""
        from drkernel.env.measure.profiling import device_records

        prof, self.profiler = self.profiler, None
        if prof is None:
            return []
        records = device_records(self.kineto["disable"](), self.kineto)
        if self.guard is not None:
            self.guard.accept(["profiler_enabled"])  # the harness stopped it (after the request's check)
        return records

    def after_call(self) -> None:
        """Right after a call returns: the audit's new records and the cheap part of the fingerprint."""
        if self.role != "candidate" or self.guard is None:
            return
        self._collect(self.guard.changes(full=False))
        if self.mode is not None:
            if _mode_changed(_mode_state(self.mode), self._mode_id):
                self._add("harness_tampered", "the harness's dispatch mode was modified")

    def finish_request(self, full: bool) -> None:
        if self.role != "candidate" or self.guard is None:
            return
        self._collect(self.guard.changes(full=full))
        if not self.recorder.hooks_intact():
            self._add("harness_tampered", "Triton's launch entry points were replaced")

    def _collect(self, changes: list[str]) -> None:
        records = self.auditor.records()
        for hack_id, detail in records[self._seen_records:]:
            self._add(hack_id, detail)
        self._seen_records = len(records)
        for c in changes:
            self._add("global_state_changed", c)

    def _add(self, hack_id: str, detail: str) -> None:
        item = [hack_id, detail[:300]]
        if item not in self.findings and len(self.findings) < 64:
            self.findings.append(item)

    def interpreted_news(self, kind: str) -> list[str]:
        """The interpreter's records of ``kind`` since the last ask (drkernel.env.process.interpreter)."""
        if self.interpreted is None:
            return []
        try:  # the ledger's own generator (drkernel.env.guards.audit.sealed_ledger), nothing of the interpreter module's
            found = [r[1] for r in self.interpreted(("read",)) or []
                     if type(r) is tuple and len(r) == 2 and type(r[0]) is str and type(r[1]) is str and r[0] == kind]
        except Exception:  # noqa: BLE001 - a broken ledger: nothing recorded
            return []
        seen = self._interpreted_seen.get(kind, 0)
        self._interpreted_seen[kind] = len(found)
        return [str(x)[:300] for x in found[seen:]]

    def take_findings(self) -> list[list[str]]:
        out, self.findings = self.findings, []
        return out

    # -- helpers ----------------------------------------------------------------------------------------
    def _prefill(self, nbytes: int, pattern: str) -> None:
        """Leave freed memory filled with garbage so unwritten outputs show up (Sakana-style reuse)."""
        if nbytes <= 0 or pattern == "none":
            return
        torch = self.torch
        n = max(nbytes // 4, 1)
        value = float("nan") if pattern == "nan" else 1.2345e30
        blocks = [torch.empty(n, dtype=torch.float32, device=self.device).fill_(value) for _ in range(4)]
        if self.device == "cuda":
            torch.cuda.synchronize()
        del blocks


def _shapes(shapes: list[list[int]]) -> str:
    text = ", ".join(str(tuple(s)) for s in shapes[:8])
    return f"[{text}{', ...' if len(shapes) > 8 else ''}] ({len(shapes)} tensors)"


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
