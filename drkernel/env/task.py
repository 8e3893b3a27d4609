"""Tasks in KernelBench format, and the inputs the grader draws for them.

A task file defines ``Model``, ``get_inputs()`` and ``get_init_inputs()`` (see docs/task-format.md).
The grader loads it in its own process; the candidate never supplies inputs or constructor args.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import types
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

import numpy as np
import torch

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
    extra: dict[str, Any] = field(default_factory=dict)

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
        """Execute the task source (trusted) in a fresh module with the size knob set."""
        module = types.ModuleType(f"_drkernel_task_{self.digest}")
        module.__file__ = str(self.path) if self.path else f"<task {self.name}>"
        with _env_var(SIZE_ENV_VAR, task_size):
            try:
                code = compile(self.source, module.__file__, "exec")
                exec(code, module.__dict__)  # noqa: S102 - the reference is trusted input
            except Exception as exc:  # noqa: BLE001 - any failure means an unusable task
                raise TaskError(f"task {self.name} failed to load: {type(exc).__name__}: {exc}") from exc
        for attr in (self.entry_point, "get_inputs", "get_init_inputs"):
            if not hasattr(module, attr):
                raise TaskError(f"task {self.name} does not define {attr}")
        return LoadedTask(self, module, task_size)


@contextlib.contextmanager
def _env_var(name: str, value: str) -> Iterator[None]:
    old = os.environ.get(name)
    os.environ[name] = value
    try:
        yield
    finally:
        if old is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = old


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

    def tolerance(self, atol: float, rtol: float) -> tuple[float, float]:
        tol = getattr(self.module, "TOLERANCE", None) or {}
        return float(tol.get("atol", atol)), float(tol.get("rtol", rtol))

    def init_inputs(self, seed: int) -> list[Any]:
        with _seeded(seed), _env_var(SIZE_ENV_VAR, self.task_size):
            return _as_list(self.module.get_init_inputs(), "get_init_inputs")

    def build_model(self, init_inputs: list[Any], seed: int, device: str) -> torch.nn.Module:
        args, kwargs = split_init_inputs(init_inputs)
        with _seeded(seed):
            model = self.model_cls(*args, **kwargs)
        return model.to(device).eval()

    def draw_inputs(self, seed: int, distribution: str) -> list[Any]:
        """Inputs for one trial: ``get_inputs()`` under ``seed``, then the distribution's transform."""
        with _seeded(seed), _env_var(SIZE_ENV_VAR, self.task_size):
            inputs = _as_list(self.module.get_inputs(), "get_inputs")
        return transform_inputs(inputs, distribution, seed)


def split_init_inputs(init_inputs: list[Any]) -> tuple[list[Any], dict[str, Any]]:
    """KernelGYM convention: ``[[], {kwargs}]`` means keyword arguments."""
    if len(init_inputs) == 2 and isinstance(init_inputs[1], dict) and isinstance(init_inputs[0], (list, tuple)):
        return list(init_inputs[0]), dict(init_inputs[1])
    return list(init_inputs), {}


def _as_list(value: Any, what: str) -> list[Any]:
    if isinstance(value, (list, tuple)):
        return list(value)
    raise TaskError(f"{what}() must return a list, got {type(value).__name__}")


@contextlib.contextmanager
def _seeded(seed: int) -> Iterator[None]:
    """Seed torch's global CPU generator for KernelBench-style code, leaving the caller's RNG untouched."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        yield


def distribution_scale(seed: int) -> float:
    """``s`` for the ``scaled`` distribution: log-uniform in [1e-2, 1e2], from the trial seed."""
    return float(10.0 ** np.random.default_rng(seed).uniform(-2.0, 2.0))


def scale_floats(inputs: list[Any], factor: float) -> list[Any]:
    """New inputs with floating-point tensors multiplied by ``factor``; other tensors (indices) are
    copied unchanged, other values kept. The grader and the candidate's process both build timed
    inputs with this, so both sides get bit-identical tensors."""
    return [(x * factor if x.is_floating_point() else x.clone()) if isinstance(x, torch.Tensor) else x
            for x in inputs]


def transform_inputs(inputs: list[Any], distribution: str, seed: int) -> list[Any]:
    """Apply an input distribution to floating-point tensors (integers, e.g. indices, are kept)."""
    if distribution == "native":
        return inputs
    if distribution == "negated":
        return scale_floats(inputs, -1.0)
    if distribution == "scaled":
        return scale_floats(inputs, distribution_scale(seed))
    raise ValueError(f"unknown distribution {distribution!r}")


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
