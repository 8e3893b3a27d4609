"""Tasks in KernelBench format, and the inputs the grader draws for them.

A task file defines ``Model``, ``get_inputs()`` and ``get_init_inputs()`` (see docs/task-format.md).
The grader loads it in its own process; the candidate never supplies inputs or constructor args.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import types
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

import numpy as np
import torch
from torch.overrides import TorchFunctionMode

from drkernel.env.config import DISTRIBUTIONS

SIZE_ENV_VAR = "DRKERNEL_TASK_SIZE"


class TaskError(ValueError):
    """The task file itself is unusable (not the candidate's fault)."""


@dataclass
class Task:
    """A reference program in KernelBench format."""

    name: str
    source: str
    path: Path | None = None
    entry_point: str = "Model"

    @classmethod
    def from_file(cls, path: str | os.PathLike, entry_point: str = "Model") -> "Task":
        p = Path(path)
        if not p.is_file():
            raise TaskError(f"task file not found: {p}")
        try:
            source = p.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise TaskError(f"cannot read task file {p}: {exc}") from exc
        return cls(name=p.stem, source=source, path=p.resolve(), entry_point=entry_point)

    @classmethod
    def from_source(cls, source: str, name: str = "task", entry_point: str = "Model") -> "Task":
        return cls(name=name, source=source, entry_point=entry_point)

    @property
    def digest(self) -> str:
        return hashlib.sha256(self.source.encode()).hexdigest()[:16]

    def load(self, task_size: str = "full") -> "LoadedTask":
        """Execute the task source (trusted) in a fresh module with the size knob set.

        The knob reaches the task through a private view of ``os`` (``os.environ`` and
        ``os.getenv`` see ``DRKERNEL_TASK_SIZE=task_size``): the process environment is never
        changed, so loads in concurrent threads cannot see each other's size.
        """
        module = types.ModuleType(f"_drkernel_task_{self.digest}")
        module.__file__ = str(self.path) if self.path else f"<task {self.name}>"
        module.__dict__["__builtins__"] = _builtins_with_env({SIZE_ENV_VAR: task_size})
        try:
            code = compile(self.source, module.__file__, "exec")
            exec(code, module.__dict__)  # noqa: S102 - the reference is trusted input
        except Exception as exc:  # noqa: BLE001 - any failure means an unusable task
            raise TaskError(f"task {self.name} failed to load: {type(exc).__name__}: {exc}") from exc
        for attr in (self.entry_point, "get_inputs", "get_init_inputs"):
            if not hasattr(module, attr):
                raise TaskError(f"task {self.name} does not define {attr}")
        return LoadedTask(self, module, task_size)


class _OsView(types.ModuleType):
    """``os`` as a task sees it: the real module, with an environment of its own."""

    def __init__(self, environ: dict[str, str]):
        super().__init__("os")
        self.__dict__["environ"] = environ

    def __getattr__(self, name: str) -> Any:
        return getattr(os, name)

    def getenv(self, key: str, default: Any = None) -> Any:
        return self.environ.get(key, default)


def _builtins_with_env(overrides: dict[str, str]) -> dict[str, Any]:
    import builtins

    view = _OsView({**os.environ, **overrides})
    real_import = builtins.__import__

    def _import(name, globals=None, locals=None, fromlist=(), level=0):  # noqa: A002 - builtins' signature
        if name == "os" and level == 0:
            return view
        return real_import(name, globals, locals, fromlist, level)

    return {**builtins.__dict__, "__import__": _import}


#: Random functions implemented in C whose ``generator=`` keyword the draw fills in.
_RANDOM_BUILTINS = frozenset({
    "randn", "rand", "randint", "randperm", "normal", "multinomial", "bernoulli", "poisson",
    "randn_like", "rand_like", "randint_like", "normal_", "uniform_", "random_", "bernoulli_",
    "exponential_", "geometric_", "log_normal_", "cauchy_",
})
_FACTORIES = frozenset({"randn", "rand", "randint", "randperm"})


def _takes_generator(func: Any) -> bool:
    name = getattr(func, "__name__", "")
    if name in _RANDOM_BUILTINS:
        return True
    try:
        import inspect

        return "generator" in inspect.signature(func).parameters  # nn.init.kaiming_uniform_ & co.
    except (TypeError, ValueError):
        return False


class SeededRandom(TorchFunctionMode):
    """Route every torch random call made inside the block to private generators seeded by ``seed``.

    ``torch.manual_seed`` would reseed the process-wide generator: two threads drawing at once
    would then take numbers from each other's streams. Here each block owns
    one generator per device (created on first use with ``Generator.manual_seed(seed)``), passed as
    ``generator=`` to torch's random functions, tensor methods (``uniform_``...) and ``nn.init``.
    The grader and the candidate's process both draw through this class, so they get bit-identical
    values. Function modes are thread-local: other threads are not affected. (Random numbers from
    numpy or ``random`` inside a task are not covered.)
    """

    def __init__(self, seed: int):
        super().__init__()
        self.seed = int(seed)
        self._gens: dict[torch.device, torch.Generator] = {}

    def generator(self, device: Any) -> torch.Generator:
        dev = torch.device(device if device is not None else "cpu")
        if dev.type == "cuda" and dev.index is None:
            dev = torch.device("cuda", torch.cuda.current_device())
        gen = self._gens.get(dev)
        if gen is None:
            gen = torch.Generator(device=dev)
            gen.manual_seed(self.seed)
            self._gens[dev] = gen
        return gen

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = dict(kwargs or {})
        if kwargs.get("generator") is None and _takes_generator(func):
            name = getattr(func, "__name__", "")
            first = next((a for a in args if isinstance(a, torch.Tensor)), None)
            if name in _FACTORIES or first is None:
                device = kwargs.get("device")
                if device is None:
                    device = torch.get_default_device()
            else:
                device = first.device
            kwargs["generator"] = self.generator(device)
        return func(*args, **kwargs)


@dataclass
class LoadedTask:
    task: Task
    module: types.ModuleType
    task_size: str

    @property
    def model_cls(self) -> type:
        return getattr(self.module, self.task.entry_point)

    def allowed_distributions(self, requested: tuple[str, ...]) -> tuple[str, ...]:
        declared = getattr(self.module, "INPUT_DISTRIBUTIONS", DISTRIBUTIONS)
        out = tuple(d for d in requested if d in declared)
        return out or ("native",)

    def precision(self) -> str | None:
        """The task's ``PRECISION`` (a policy name of :mod:`drkernel.env.judge.precision`), or None."""
        value = getattr(self.module, "PRECISION", None)
        if value is None:
            return None
        from drkernel.env.judge.precision import POLICIES

        if not isinstance(value, str) or value not in POLICIES:
            raise TaskError(f"task {self.task.name}: PRECISION must be one of {sorted(POLICIES)}, got {value!r}")
        return value

    def tolerance(self, atol: float, rtol: float) -> tuple[float, float]:
        tol = getattr(self.module, "TOLERANCE", None) or {}
        return float(tol.get("atol", atol)), float(tol.get("rtol", rtol))

    def init_inputs(self, seed: int) -> list[Any]:
        return self._call("get_init_inputs", seed)

    def build_model(self, init_inputs: list[Any], seed: int, device: str) -> torch.nn.Module:
        args, kwargs = split_init_inputs(init_inputs)
        with SeededRandom(seed):
            model = self.model_cls(*args, **kwargs)
        return model.to(device).eval()

    def draw_inputs(self, seed: int, distribution: str, device: str = "cpu") -> list[Any]:
        """Inputs for one trial: ``get_inputs()`` under ``seed``, moved to ``device``, then the
        distribution's transform. Identical in the grader and in the candidate's process.

        On a GPU the draw itself runs there: factories without an explicit device (``torch.randn``)
        create their tensors on ``device`` with a CUDA generator (a 256 MiB ``randn`` takes about a
        second on the CPU and microseconds on an H100; both sides draw on the same GPU, so they
        still agree bit for bit)."""
        inputs = self._call("get_inputs", seed, device if str(device).startswith("cuda") else None)
        try:
            inputs = [x.to(device) if isinstance(x, torch.Tensor) else x for x in inputs]
        except (RuntimeError, AssertionError) as exc:
            raise TaskError(f"task {self.task.name}: get_inputs() output cannot move to {device}: "
                            f"{type(exc).__name__}: {_first_line(exc)}") from exc
        return transform_inputs(inputs, distribution, seed, fixed=self.fixed_inputs())

    def fixed_inputs(self) -> tuple[int, ...]:
        """Positions of ``get_inputs()`` the distributions leave as drawn (``FIXED_INPUTS``: e.g.
        sorted offsets whose order carries meaning); they still change with every seed."""
        fixed = getattr(self.module, "FIXED_INPUTS", ())
        try:
            return tuple(int(i) for i in fixed)
        except (TypeError, ValueError):
            raise TaskError(f"task {self.task.name}: FIXED_INPUTS must be a sequence of input positions") from None

    def _call(self, fn_name: str, seed: int, device: str | None = None) -> list[Any]:
        """``fn_name()`` of the task under :class:`SeededRandom` (and ``torch.device(device)`` when
        given). A failure is the task's (TaskError): e.g. KernelBench's own ``get_inputs`` calls
        ``.cuda()``, which cannot run on a CPU machine."""
        try:
            with contextlib.ExitStack() as stack:
                if device is not None:
                    stack.enter_context(torch.device(device))
                stack.enter_context(SeededRandom(seed))
                value = getattr(self.module, fn_name)()
        except Exception as exc:  # noqa: BLE001 - the task is trusted code; any failure is the task's
            raise TaskError(f"task {self.task.name}: {fn_name}() failed: {type(exc).__name__}: "
                            f"{_first_line(exc)}") from exc
        return _as_list(value, fn_name)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def split_init_inputs(init_inputs: list[Any]) -> tuple[list[Any], dict[str, Any]]:
    """KernelGYM convention: ``[[], {kwargs}]`` means keyword arguments."""
    if len(init_inputs) == 2 and isinstance(init_inputs[1], dict) and isinstance(init_inputs[0], (list, tuple)):
        return list(init_inputs[0]), dict(init_inputs[1])
    return list(init_inputs), {}


def _as_list(value: Any, what: str) -> list[Any]:
    if isinstance(value, (list, tuple)):
        return list(value)
    raise TaskError(f"{what}() must return a list, got {type(value).__name__}")


SCALE_RANGE = (1e-2, 1e2)
"""The ``scaled`` distribution's range of ``s``; its ends are trials of their own (``scaled_min``,
``scaled_max``: :data:`SCALE_ENDS`)."""
SCALE_ENDS = {"scaled_min": (SCALE_RANGE[0], 0.5), "scaled_max": (SCALE_RANGE[1], 2.0)}
"""``(s, t)`` of the trials at the ends of the scale range: every evaluation of a task that allows
``scaled`` inputs includes both, so a kernel that overflows at large inputs (no max subtraction) or
misplaces an epsilon (visible at small ones) fails every time, not when a draw lands there."""


def distribution_scale(seed: int) -> float:
    """``s`` for the ``scaled`` distribution: log-uniform in [1e-2, 1e2], from the trial seed."""
    lo, hi = SCALE_RANGE
    return float(10.0 ** np.random.default_rng(seed).uniform(np.log10(lo), np.log10(hi)))


def scalar_scale(seed: int) -> float:
    """``t`` for Python ``float`` inputs under ``scaled``: log-uniform in [1/2, 2], from the trial
    seed (a stream of its own, so it is not a function of the tensors' ``s``)."""
    return float(2.0 ** np.random.default_rng([int(seed) % (1 << 63), 1]).uniform(-1.0, 1.0))


def scale_floats(inputs: list[Any], factor: float) -> list[Any]:
    """New inputs with floating-point tensors multiplied by ``factor``; other tensors (indices) are
    copied unchanged, other values kept. The grader and the candidate's process both build timed
    inputs with this, so both sides get bit-identical tensors."""
    return [(x * factor if x.is_floating_point() else x.clone()) if isinstance(x, torch.Tensor) else x
            for x in inputs]


def transform_inputs(inputs: list[Any], distribution: str, seed: int, fixed: tuple[int, ...] = ()) -> list[Any]:
    """Apply an input distribution to every tensor input (positions in ``fixed`` excepted).

    ``native``: as drawn. ``negated``: floating tensors ``-x``, boolean tensors ``~x`` (a mask
    flipped), integer tensors shuffled. ``scaled``: floating tensors ``x * s`` (``s`` log-uniform in
    [1e-2, 1e2]), boolean and integer tensors shuffled, Python ``float`` arguments ``v * t`` (``t``
    log-uniform in [1/2, 2], its own draw: a temperature or a scale the task passes as a plain
    number is an input too, and a kernel that bakes its value in fails these trials).
    ``scaled_min``/``scaled_max``: the same at the ends of both ranges (:data:`SCALE_ENDS`). Python ints
    and bools (dimensions, flags) are never changed. Shuffling keeps the multiset of values, so
    indices stay in range while their positions change: a kernel that ignores a mask or an index
    input cannot pass on luck. Every seed also draws new values (``get_inputs`` runs under it).
    Positions in ``fixed`` (the task's ``FIXED_INPUTS``) are left as drawn."""
    if distribution == "native":
        return inputs
    if distribution not in ("negated", "scaled", *SCALE_ENDS):
        raise ValueError(f"unknown distribution {distribution!r}")
    factor, scalar = {"negated": (-1.0, 1.0), "scaled": (None, None)}.get(distribution) or SCALE_ENDS[distribution]
    if factor is None:
        factor, scalar = distribution_scale(seed), scalar_scale(seed)
    scaled = distribution != "negated"
    gen = torch.Generator().manual_seed(int(seed) % (1 << 63))
    out = []
    for i, x in enumerate(inputs):
        if i in fixed:
            out.append(x)
        elif type(x) is float:  # exactly float: bool and int subclasses of int stay
            out.append(x * scalar if scaled else x)
        elif not isinstance(x, torch.Tensor):
            out.append(x)
        elif x.is_floating_point() or x.is_complex():
            out.append(x * factor)
        elif x.dtype == torch.bool and distribution == "negated":
            out.append(~x)
        elif x.numel() > 1:
            perm = torch.randperm(x.numel(), generator=gen).to(x.device)
            out.append(x.reshape(-1)[perm].reshape(x.shape))
        else:
            out.append(x)
    return out


def parameter_shapes(model: torch.nn.Module) -> tuple[list[list[int]], list[list[int]]]:
    """Shapes of a model's floating parameters and buffers, in registration order."""
    params = [list(p.shape) for p in model.parameters()]
    buffers = [list(b.shape) for b in model.buffers() if b.is_floating_point()]
    return params, buffers


@torch.no_grad()
def reload_parameters(model: torch.nn.Module, seed: int, buffers: bool = True) -> None:
    """Load fresh values into a model's floating parameters (and buffers), in place, from ``seed``.

    Parameters are inputs of the computation: a forward must read their current values, not
    results derived from them in ``__init__``. The grader applies this to the reference and the
    worker to ``ModelNew`` (same shapes, same order), before a correctness trial::

        p <- p * (0.5 + u) + 0.1 * rms(p) * n,   u ~ U[0, 1), n ~ N(0, 1)   (rms(p) = 1 when p == 0)
        b <- b * (0.5 + u)                                                  (buffers: signs kept, e.g.
                                                                             running variances stay > 0)

    drawn in order from a generator seeded with ``seed`` on each tensor's device, so both sides get
    the same values (up to the rounding of ``rms``)."""
    reload_tensors(list(model.parameters()),
                   [b for b in model.buffers() if b.is_floating_point()] if buffers else [], seed)


# torch's functions the reload uses, bound at import: in the candidate's process a rebinding of
# ``torch.rand`` (say) that restores itself would otherwise run its code during the reload, with the
# new parameter values in reach, off the clock (drkernel.env.guards.seal seals this module's bindings); the
# grad mode through its C functions (torch.no_grad's Python looks up torch's namespace)
_rand, _randn, _where, _ones_like, _Generator = torch.rand, torch.randn, torch.where, torch.ones_like, torch.Generator
_FLOAT32 = torch.float32
_set_grad, _grad_enabled = torch._C._set_grad_enabled, torch._C.is_grad_enabled


def reload_tensors(params: list[torch.Tensor], buffers: list[torch.Tensor], seed: int) -> None:
    """:func:`reload_parameters` on tensors listed beforehand: the worker lists the candidate's
    parameters once, at load, so reloading them calls no method of the candidate's model (an
    overridden ``parameters()`` would otherwise run the candidate's code between its calls, off the
    clock). The worker also refuses parameter and buffer subclasses, so ``copy_`` and the arithmetic
    here are torch's own."""
    was = _grad_enabled()
    _set_grad(False)
    try:
        _reload(params, buffers, seed)
    finally:
        _set_grad(was)


def _reload(params: list[torch.Tensor], buffers: list[torch.Tensor], seed: int) -> None:
    gens: dict[Any, torch.Generator] = {}
    f32 = _FLOAT32

    def gen(device: torch.device) -> torch.Generator:
        g = gens.get(device)
        if g is None:
            g = gens[device] = _Generator(device=device).manual_seed(int(seed) % (1 << 63))
        return g

    for p in params:
        if not p.is_floating_point():
            continue
        g = gen(p.device)
        u = _rand(p.shape, generator=g, device=p.device, dtype=f32)
        n = _randn(p.shape, generator=g, device=p.device, dtype=f32)
        pf = p.detach().float()
        rms = pf.pow(2).mean().sqrt() if p.numel() else pf.new_ones(())
        rms = _where(rms > 0, rms, _ones_like(rms))
        p.copy_((pf * (0.5 + u) + 0.1 * rms * n).to(p.dtype))
    for b in buffers:
        if b.is_floating_point():
            u = _rand(b.shape, generator=gen(b.device), device=b.device, dtype=f32)
            b.copy_((b.float() * (0.5 + u)).to(b.dtype))


def trial_seeds(master_seed: int | None, n: int, stream: str) -> list[int]:
    """``n`` hidden seeds for one purpose (``stream``), derived from the evaluation's master seed.

    With ``master_seed=None`` the seeds come from the OS: nobody, the candidate included, can
    predict them. A fixed master seed makes a whole evaluation reproducible.
    """
    entropy = master_seed if master_seed is not None else int.from_bytes(os.urandom(16), "little")
    key = int(hashlib.sha256(stream.encode()).hexdigest()[:8], 16)
    ss = np.random.SeedSequence([entropy % (1 << 63), key])
    return [int(x) for x in ss.generate_state(n, dtype=np.uint64) % (1 << 62)]


def tensors_in(args: Any) -> Iterator[torch.Tensor]:
    if isinstance(args, torch.Tensor):
        yield args
    elif isinstance(args, (list, tuple)):
        for a in args:
            yield from tensors_in(a)
    elif isinstance(args, dict):
        for a in args.values():
            yield from tensors_in(a)
