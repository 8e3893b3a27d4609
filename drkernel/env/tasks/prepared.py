"""A task made ready for grading: loaded once, reference models and outputs cached.

Graders see the same task many times (16 samples of one prompt, several turns) with the same
hidden seed per group; the reference side of an evaluation depends only on (task, size, device,
seed), so it is computed once and reused across candidates::

    prepared = PreparedTask.prepare(task, task_size="small", device="cpu")
    ref = prepared.reference(init_seed, TrialKey(seed=123, distribution="native"))  # cached

Reference outputs are kept on the evaluation device, least recently used first out beyond
``cache_bytes``. Everything here runs in the grader's process, before the candidate's process
receives any work (a candidate that fills GPU memory cannot make the grader's references fail).
Thread-safe: the caches are guarded by one lock per prepared task, the computations by a lock per
init seed (:attr:`PreparedTask.STRIPES` of them), so the forwards of one model never overlap while
concurrent evaluations under other seeds compute theirs at the same time.
"""

from __future__ import annotations

import copy
import threading
import weakref
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any, Callable

import torch

from drkernel.env.judge.compare import aliases, is_dense
from drkernel.env.result import EnvironmentFailure
from drkernel.env.tasks.task import (LoadedTask, Task, TaskError, parameter_shapes, reload_parameters, scale_floats,
                               tensors_in)


@dataclass(frozen=True)
class TrialKey:
    """Which inputs: ``draw_inputs(seed, distribution)``, times ``factor`` when given (timed calls)."""

    seed: int
    distribution: str = "native"
    factor: float | None = None


@dataclass
class ReferenceOutput:
    out: torch.Tensor
    aliases_input: bool
    dense: bool
    shapes: str
    contiguous: bool = True
    """Whether the reference's own output is row-major (``out`` may be a contiguous copy of a view)."""
    sensitivity: Callable[[torch.Tensor], torch.Tensor | None] | None = field(default=None, repr=False)
    """``sensitivity(out)`` computes, on demand, the output's sensitivity to rounding
    (:meth:`PreparedTask.sensitivity` bound to this output's inputs and parameters; it holds its
    task weakly and raises RuntimeError once the task is gone)."""
    oracle: torch.Tensor | None = field(default=None, repr=False)
    """The reference evaluated in float64 on the same inputs and parameters (:mod:`drkernel.env.tasks.oracle`);
    None for integer outputs, or where the reference cannot run in float64 (``oracle_note`` says why)."""
    oracle_note: str = ""
    rounded: Callable[[str], torch.Tensor | None] | None = field(default=None, repr=False)
    """``rounded(fmt)``: the float64 reference on inputs and parameters rounded to ``fmt`` (``tf32``,
    ``bf16``, ``fp16``), on demand and kept: a looser precision policy's yardstick
    (:meth:`PreparedTask.rounded_oracle`; held like ``sensitivity``)."""

    @property
    def nbytes(self) -> int:
        n = self.out.numel() * self.out.element_size()
        return n + (self.oracle.numel() * self.oracle.element_size() if self.oracle is not None else 0)


@dataclass
class PreparedTask:
    task: Task
    task_size: str
    device: str
    loaded: LoadedTask
    cache_bytes: int = 1 << 30
    _models: "OrderedDict[tuple[int, int | None, bool], torch.nn.Module]" = field(default_factory=OrderedDict, repr=False)
    _outputs: "OrderedDict[tuple[int, int | None, bool, TrialKey], ReferenceOutput]" = field(default_factory=OrderedDict,
                                                                                       repr=False)
    _templates: "OrderedDict[int, torch.nn.Module]" = field(default_factory=OrderedDict, repr=False)
    """Reference models on the device as built, never run, by init seed (:meth:`template`)."""
    _built: "OrderedDict[int, torch.nn.Module]" = field(default_factory=OrderedDict, repr=False)
    """Reference models built ahead on the CPU, by init seed (:meth:`prebuild`), until moved."""
    _building: dict[int, threading.Event] = field(default_factory=dict, repr=False)
    _users: dict[int, int] = field(default_factory=dict, repr=False)
    """Evaluations in flight per init seed (:meth:`use`, :meth:`forget`)."""
    _bytes: int = 0
    _lock: threading.RLock = field(default_factory=threading.RLock, repr=False)
    """Guards the caches (never held while a model runs)."""
    _stripes: list[threading.RLock] = field(
        default_factory=lambda: [threading.RLock() for _ in range(PreparedTask.STRIPES)], repr=False)
    timings: dict[tuple, Any] = field(default_factory=dict, repr=False)
    _costs: dict[int, float] = field(default_factory=dict, repr=False)
    """Reference timings by protocol key (:mod:`drkernel.env.tasks.reference_timing`)."""
    hits: int = 0
    misses: int = 0

    @classmethod
    def prepare(cls, task: Task, task_size: str, device: str, cache_bytes: int = 1 << 30) -> "PreparedTask":
        """Load the task (executes its source once). Raises TaskError for an unusable task."""
        return cls(task, task_size, device, task.load(task_size), cache_bytes)

    STRIPES = 16
    """Locks over init seeds: a model (and its outputs) under one seed is built and run by one
    thread at a time (a reference may keep state between forwards); other seeds run concurrently."""

    def init_inputs(self, init_seed: int) -> list[Any]:
        return self.loaded.init_inputs(init_seed)

    def _seed_lock(self, init_seed: int) -> threading.RLock:
        return self._stripes[hash(int(init_seed)) % len(self._stripes)]

    def pristine(self, init_seed: int, device: str = "cpu") -> torch.nn.Module:
        """A new reference model built under ``init_seed`` on ``device``, never run (the caller's
        own: an evaluation builds one on the CPU outside the GPU gate for :meth:`reference`'s
        ``pristine=`` and moves it to the device)."""
        return self.loaded.build_model(self.loaded.init_inputs(init_seed), init_seed, device)

    def use(self, init_seed: int) -> None:
        """An evaluation under ``init_seed`` starts: its models stay until the last evaluation under
        that seed calls :meth:`forget` (in RL, a prompt's samples share a seed)."""
        with self._lock:
            self._users[init_seed] = self._users.get(init_seed, 0) + 1

    def forget(self, init_seed: int) -> None:
        """An evaluation under ``init_seed`` ends (:meth:`use`); with the last one, drop the models
        under that seed (template, build, parameter variants): the grader's device memory then
        follows the evaluations in flight, not the last few per task. Their outputs stay cached; a
        model needed again is rebuilt."""
        with self._lock:
            left = self._users.get(init_seed, 1) - 1
            if left > 0:
                self._users[init_seed] = left
                return
            self._users.pop(init_seed, None)
            self._templates.pop(init_seed, None)
            self._built.pop(init_seed, None)
            for key in [k for k in self._models if k[0] == init_seed]:
                del self._models[key]

    def prebuild(self, init_seed: int) -> torch.nn.Module:
        """The reference under ``init_seed`` built on the CPU, ahead, and kept until
        :meth:`template` moves it (CPU work only: an evaluation calls this outside the GPU gate, so
        a large ``__init__`` does not hold the GPU's shared side). Built outside every lock another
        evaluation could hold inside the gate: one build per seed, others under the same seed wait
        for it here. Returns the build, or the template when there is one (its shapes are the same)."""
        while True:
            with self._lock:
                done = self._templates.get(init_seed)
                if done is None:
                    done = self._built.get(init_seed)
                if done is not None:
                    return done
                building = self._building.get(init_seed)
                if building is None:
                    self._building[init_seed] = building = threading.Event()
                    break
            building.wait()  # another thread builds it: take its result (or build, if it failed)
        try:
            built = self.pristine(init_seed)
        except Exception as exc:  # noqa: BLE001 - the reference is trusted: its failure is the task's
            raise TaskError(f"task {self.task.name}: Model(*get_init_inputs()) failed: "
                            f"{type(exc).__name__}: {exc}") from exc
        finally:
            with self._lock:
                self._building.pop(init_seed, None)
            building.set()
        with self._lock:
            _keep(self._built, init_seed, built, self.TEMPLATES)
        return built

    TEMPLATES = 8
    """Reference models kept as built, never run, per task (least recently used out, beyond the
    evaluations in flight: :meth:`forget` drops them as their evaluations end)."""

    def template(self, init_seed: int) -> torch.nn.Module:
        """The reference under ``init_seed`` as built, on the device, never run: copied
        (``copy.deepcopy``, device to device) for every model that runs, so one build on the CPU
        serves every trial's parameters and the spot checks' models. Cached, and settled before it
        is published (other evaluations copy it on their own streams)."""
        with self._seed_lock(init_seed):
            with self._lock:
                t = _recent(self._templates, init_seed)
            if t is not None:
                return t
            built = self.prebuild(init_seed)  # (built here when no evaluation built it ahead)
            with self._lock:
                self._built.pop(init_seed, None)
            try:
                t = built.to(self.device).eval()
            except Exception as exc:  # noqa: BLE001 - the reference is trusted: its failure is the task's
                raise TaskError(f"task {self.task.name}: the reference cannot move to {self.device}: "
                                f"{type(exc).__name__}: {exc}") from exc
            _settled(self.device)
            with self._lock:
                _keep(self._templates, init_seed, t, self.TEMPLATES)
            return t

    def _copy(self, template: torch.nn.Module) -> torch.nn.Module:
        """A copy of a template to run; settled before the caller may drop its hold of the template
        (the last hold dropped while a copy still read it, on another stream than the one that
        allocated it, would give its memory back to that stream's evaluations too early)."""
        m = copy.deepcopy(template)
        _settled(self.device)
        return m

    def model(self, init_seed: int, reload_seed: int | None = None, buffers: bool = True) -> torch.nn.Module:
        """The reference built under ``init_seed`` (a copy of :meth:`template`), with fresh
        parameter (and, with ``buffers``, buffer) values from ``reload_seed``
        (:func:`~drkernel.env.tasks.task.reload_parameters`) when given."""
        key = (init_seed, reload_seed, buffers if reload_seed is not None else True)
        with self._seed_lock(init_seed):
            with self._lock:
                m = _recent(self._models, key)
            if m is not None:
                return m
            template = self.template(init_seed)  # held until the copy is settled (see _copy)
            m = copy.deepcopy(template)
            if reload_seed is not None:
                reload_parameters(m, reload_seed, buffers=buffers)
            _settled(self.device)  # other evaluations run it on their own streams
            with self._lock:
                _keep(self._models, key, m, 8)
            return m

    def shapes(self, init_seed: int) -> tuple[list[list[int]], list[list[int]]]:
        """The reference's parameter and buffer shapes (ModelNew must hold the same), read from its
        build or template: no work on the device (the grader calls this outside the GPU gate)."""
        return parameter_shapes(self.prebuild(init_seed))

    def draw(self, key: TrialKey) -> list[Any]:
        inputs = self.loaded.draw_inputs(key.seed, key.distribution, self.device)
        return scale_floats(inputs, key.factor) if key.factor is not None else inputs

    def reference(self, init_seed: int, key: TrialKey, reload_seed: int | None = None,
                  buffers: bool = True, cache: bool = True, pristine: torch.nn.Module | None = None) -> ReferenceOutput:
        """The reference's output on ``key``'s inputs with parameters from (``init_seed``,
        ``reload_seed``) (computed once, then cached; ``cache=False`` for inputs no other evaluation
        will see again, such as a timed call's, whose model is not kept either). ``pristine``
        (with ``cache=False``): the model under ``init_seed``, as built and never run, on the
        device; a copy of it runs (default: a copy of :meth:`template`)."""
        ckey = (init_seed, reload_seed, buffers, key)
        with self._lock:
            cached = _recent(self._outputs, ckey)
            if cached is not None:
                self.hits += 1
                return cached
            self.misses += 1
        with self._seed_lock(init_seed):
            with self._lock:  # computed meanwhile by another thread under this seed?
                cached = self._outputs.get(ckey)
            if cached is not None:
                return cached
            if cache:
                model = self.model(init_seed, reload_seed, buffers)
            else:
                model = self._copy(pristine if pristine is not None else self.template(init_seed))
                if reload_seed is not None:
                    reload_parameters(model, reload_seed, buffers=buffers)
            inputs = self.draw(key)
            shapes = ", ".join(str(tuple(t.shape)) for t in tensors_in(inputs)) or "-"
            # the oracle's copies are taken before the forward (a reference may change its state
            # or its inputs in place)
            wide = _widened(model, inputs)
            try:
                with torch.no_grad():
                    out = model(*inputs)
            except torch.OutOfMemoryError as exc:  # the grader's device is full: not the task's fault
                raise EnvironmentFailure(f"the grader ran out of device memory for the reference of "
                                         f"{self.task.name}: {str(exc)[:200]}") from exc
            except Exception as exc:  # noqa: BLE001 - the reference is broken: an unusable task, not a verdict
                raise TaskError(f"the reference forward of {self.task.name} raised {type(exc).__name__}: "
                                f"{exc}") from exc
            if not isinstance(out, torch.Tensor):
                raise TaskError(f"the reference forward of {self.task.name} returned {type(out).__name__}; "
                                "a single tensor is required")
            tensors = list(tensors_in(inputs))
            probe = self._probe(init_seed, key, reload_seed, buffers)
            ref = ReferenceOutput(out.detach(), aliases(out, tensors), is_dense(out),
                                  shapes, out.is_contiguous(), probe.sensitivity, rounded=probe.rounded)
            ref.oracle, ref.oracle_note = _oracle_of(out, wide)
            del wide
            if ref.aliases_input:
                ref.out = ref.out.clone()  # keep the value, not a view of inputs dropped below
            if not cache:
                return ref
            _settled(self.device)  # other evaluations read it on their own streams
            with self._lock:
                self._outputs[ckey] = ref
                self._bytes += ref.nbytes
                while self._bytes > self.cache_bytes and len(self._outputs) > 1:
                    _, old = self._outputs.popitem(last=False)
                    self._bytes -= old.nbytes
            return ref

    def _probe(self, init_seed: int, key: TrialKey, reload_seed: int | None, buffers: bool) -> "_Probe":
        """:meth:`sensitivity` and :meth:`rounded_oracle` for one output, holding this task weakly:
        an output cached here that held its task would make a cycle, and a task dropped by its last
        user (``evaluate`` prepares one per call) would keep its outputs and models on the device
        until the garbage collector ran. An evaluation holds its task while it may ask; asked after
        its task was dropped, it raises (a silent None would change a verdict)."""
        return _Probe(weakref.ref(self), self.task.name, (init_seed, key, reload_seed, buffers))

    SENSITIVITY_DRAWS = 8
    """Perturbed forwards per sensitivity estimate: one change falls below a tenth of its scale with
    probability ~8% (a near-Gaussian error), the largest of eight ~2e-9, so one lucky element does
    not decide; and an element within a few ulp of a discontinuity (a quantiser's rounding boundary,
    where a GPU's approximate division lands on the other side) is crossed by some draw with
    probability ~0.98 (~0.85 with four), so its flip is allowed as the rounding it is."""
    SENSITIVITY_ULPS = 4.0
    """Size of the perturbation, in float32 machine epsilons (relative, uniform in +-this): a kernel's
    own arithmetic errs a few ulp before a discontinuity, not one."""

    def sensitivity(self, init_seed: int, key: TrialKey, reload_seed: int | None, buffers: bool,
                    out: torch.Tensor) -> torch.Tensor | None:
        """``sigma_i = max_k |oracle(x * (1 + e_k)) - oracle(x)|_i``: how much each element of the
        float64 oracle moves when every floating input element is perturbed by a relative
        ``e ~ U(-u, u)``, ``u`` :attr:`SENSITIVITY_ULPS` times float32's machine epsilon (float64's for
        float64 inputs): a few units in the last place of the arithmetic an honest kernel uses, whatever the inputs' storage dtype
        (a bf16 input's own ulp would measure a change of the data, 2^16x larger, not rounding).
        Largest over :attr:`SENSITIVITY_DRAWS` draws. Large where the element cancels large terms,
        ~0 where it saturates or is well conditioned: the scale of an fp32-accurate kernel's rounding
        error there (:mod:`drkernel.env.judge.precision`). float64 on ``out``'s device; None when the
        output is not floating, the inputs have nothing to perturb or the reference does not run in
        float64. Deterministic in ``key``. Called only after a comparison failed, so honest fast
        paths never pay for it."""
        from drkernel.env.tasks.oracle import OracleUnavailable, evaluate_float64, widen_inputs, widen_model

        if not out.is_floating_point():
            return None
        with self._seed_lock(init_seed):
            inputs = self.draw(key)
            if not any(isinstance(x, torch.Tensor) and x.is_floating_point() for x in inputs):
                return None
            model = widen_model(self.model(init_seed, reload_seed, buffers))
            wide = widen_inputs(inputs)
            try:
                base, _ = evaluate_float64(model, wide)
            except OracleUnavailable:
                return None
            if base.shape != out.shape:
                return None
            sigma = torch.zeros(out.shape, dtype=torch.float64, device=out.device)
            base = base.to(out.device)
            for k in range(self.SENSITIVITY_DRAWS):
                gen = None
                perturbed = []
                for x, w in zip(inputs, wide):
                    if isinstance(x, torch.Tensor) and x.is_floating_point() and x.numel():
                        if gen is None or gen.device != w.device:
                            gen = torch.Generator(device=w.device).manual_seed(
                                (int(key.seed) * 1_000_003 + 7919 * (k + 1)) % (1 << 63))
                        u = torch.rand(w.shape, generator=gen, device=w.device, dtype=torch.float64)
                        eps = torch.finfo(torch.float64 if x.dtype == torch.float64 else torch.float32).eps
                        w = w * (1.0 + (2.0 * u - 1.0) * self.SENSITIVITY_ULPS * eps)
                    perturbed.append(w)
                try:
                    moved, _ = evaluate_float64(model, perturbed)
                except OracleUnavailable:  # the oracle ran on these inputs once: no estimate
                    return None
                if moved.shape != out.shape:
                    return None
                diff = (moved.to(out.device) - base).abs()
                sigma = torch.maximum(sigma, torch.nan_to_num(diff, nan=0.0, posinf=0.0))
                del moved, diff, perturbed
            return sigma

    def rounded_oracle(self, init_seed: int, key: TrialKey, reload_seed: int | None, buffers: bool,
                       fmt: str) -> torch.Tensor | None:
        """The float64 reference on inputs and parameters rounded to ``fmt``
        (:func:`drkernel.env.judge.precision.round_operand`): what a computation whose operands are taken
        at that precision, and is otherwise exact, gives. None where there is no oracle."""
        from drkernel.env.tasks.oracle import OracleUnavailable, evaluate_float64, widen_inputs, widen_model
        from drkernel.env.judge.precision import round_operand

        with self._seed_lock(init_seed):
            model = widen_model(self.model(init_seed, reload_seed, buffers))
            with torch.no_grad():
                for t in list(model.parameters()) + list(model.buffers()):
                    if t.is_floating_point():
                        t.copy_(round_operand(t, fmt))
            inputs = [round_operand(x, fmt) if isinstance(x, torch.Tensor) and x.is_floating_point() else x
                      for x in widen_inputs(self.draw(key))]
            try:
                out, _ = evaluate_float64(model, inputs)
            except OracleUnavailable:
                return None
            return out

    def reference_cost(self, init_seed: int, key: TrialKey) -> float:
        """Byte equivalents of one reference forward (:func:`drkernel.env.measure.profiling.op_cost` over
        every aten operator it runs): the denominator of coverage on the CPU interpreter."""
        from drkernel.env.measure.profiling import make_foreign_work

        with self._seed_lock(init_seed):
            cached = self._costs.get(init_seed)
            if cached is not None:
                return cached
            total = [0.0]

            def count(msg: Any) -> None:
                total[0] += float(msg[1]())

            model = self.model(init_seed)
            inputs = self.draw(key)
            try:
                with torch.no_grad(), make_foreign_work(count):
                    model(*inputs)
            except Exception as exc:  # noqa: BLE001 - the reference is broken: an unusable task
                raise TaskError(f"the reference forward of {self.task.name} raised {type(exc).__name__}: "
                                f"{exc}") from exc
            self._costs[init_seed] = total[0]
            return total[0]

    def release(self) -> None:
        """Drop cached models and outputs (frees device memory)."""
        with self._lock:
            self._models.clear()
            self._templates.clear()
            self._built.clear()
            self._users.clear()
            self._outputs.clear()
            self._bytes = 0
            self.timings.clear()


class PreparedCache:
    """Prepared tasks by (task digest, entry point, size, device), least recently used out."""

    def __init__(self, max_tasks: int = 32, cache_bytes: int = 1 << 30):
        self.max_tasks = max_tasks
        self.cache_bytes = cache_bytes
        self._items: "OrderedDict[tuple, PreparedTask]" = OrderedDict()
        self._lock = threading.Lock()

    def get(self, task: Task, task_size: str, device: str) -> PreparedTask:
        key = (task.digest, task.entry_point, task.name, task_size, device)
        with self._lock:
            p = _recent(self._items, key)
        if p is not None:
            return p
        p = PreparedTask.prepare(task, task_size, device, self.cache_bytes)  # outside the lock: may be slow
        with self._lock:
            existing = self._items.get(key)
            if existing is not None:
                return existing
            for old in _keep(self._items, key, p, self.max_tasks):
                old.release()
        return p

    def clear(self) -> None:
        with self._lock:
            for p in self._items.values():
                p.release()
            self._items.clear()


def _recent(cache: "OrderedDict[Any, Any]", key: Any) -> Any:
    """``cache[key]``, marked most recently used, or None (under the cache's lock)."""
    value = cache.get(key)
    if value is not None:
        cache.move_to_end(key)
    return value


def _keep(cache: "OrderedDict[Any, Any]", key: Any, value: Any, limit: int) -> list[Any]:
    """``cache[key] = value``, the least recently used entries beyond ``limit`` dropped and returned
    (under the cache's lock)."""
    cache[key] = value
    dropped = []
    while len(cache) > limit:
        dropped.append(cache.popitem(last=False)[1])
    return dropped


def _settled(device: str) -> None:
    """Wait for this thread's stream to finish what it queued on ``device`` (a GPU) before another
    thread, on its own stream, may read the result: each evaluation runs the grader's GPU work on a
    stream of its own (:meth:`drkernel.env.evaluation.Evaluation.run`)."""
    if str(device).startswith("cuda"):
        torch.cuda.current_stream(torch.device(device)).synchronize()


class _Probe:
    """The oracle's on-demand measurements of one reference output, holding its task weakly
    (:meth:`PreparedTask._probe`); a looser policy's rounded oracle is kept once computed."""

    def __init__(self, task: "weakref.ref[PreparedTask]", name: str, args: tuple):
        self._task, self._name, self._args = task, name, args
        self._rounded: dict[str, torch.Tensor | None] = {}

    def _alive(self) -> PreparedTask:
        alive = self._task()
        if alive is None:
            raise RuntimeError(f"an oracle measurement of a reference output of {self._name} was asked after its "
                               "PreparedTask was dropped: keep the task while its outputs are compared")
        return alive

    def sensitivity(self, out: torch.Tensor) -> torch.Tensor | None:
        return self._alive().sensitivity(*self._args, out)

    def rounded(self, fmt: str) -> torch.Tensor | None:
        if fmt not in self._rounded:
            self._rounded[fmt] = self._alive().rounded_oracle(*self._args, fmt)
        return self._rounded[fmt]


def _widened(model: torch.nn.Module, inputs: list[Any]) -> tuple[torch.nn.Module, list[Any]] | str:
    """Float64 copies of a reference model and its inputs for the oracle, or why not."""
    from drkernel.env.tasks.oracle import widen_inputs, widen_model

    try:
        return widen_model(model), widen_inputs(inputs)
    except Exception as exc:  # noqa: BLE001 - a model that cannot be copied or widened: no oracle
        return f"the reference cannot be copied to float64: {type(exc).__name__}: {str(exc)[:160]}"


def _oracle_of(out: torch.Tensor, wide: tuple[torch.nn.Module, list[Any]] | str) -> tuple[torch.Tensor | None, str]:
    """``(oracle, note)`` for a reference output (None for integer outputs and where there is none)."""
    from drkernel.env.tasks.oracle import OracleUnavailable, evaluate_float64

    if not (out.is_floating_point() or out.is_complex()):
        return None, "not used: integer output (compared exactly)"
    if isinstance(wide, str):
        return None, wide
    try:
        oracle, where = evaluate_float64(*wide)
    except OracleUnavailable as exc:
        return None, str(exc)
    if oracle.shape != out.shape:
        return None, f"the float64 forward returned shape {tuple(oracle.shape)}, not {tuple(out.shape)}"
    return oracle.to(out.device), where


__all__ = ["PreparedTask", "PreparedCache", "ReferenceOutput", "TrialKey"]
