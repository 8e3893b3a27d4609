"""Task suites: a directory of KernelBench-format tasks with its grading protocol.

Layout (``envs/<suite>/``)::

    env.yaml                 id, description, protocol (keys below)
    tasks/<NN>_<name>.py     references (Model, get_inputs, get_init_inputs)
    solutions/<NN>_<name>.py optional reference Triton solutions (ModelNew), same file names

``env.yaml`` keys (anything else is an error, so a typo never silently falls back to a default):

.. code-block:: yaml

    id: single_ops-v1            # versioned id: a changed tolerance or timing protocol bumps it
    description: one line
    entry_point: Model           # reference class; candidates define ModelNew
    correctness: {trials_per_distribution: 2, distributions: [native, negated, scaled],
                  atol: 1.0e-4, rtol: 1.0e-4, determinism_check: true}
    timing: {warmup: 5, trials: 50, reference_backend: eager, spot_checks: 3}
    prompt_template: triton_kernelbench   # name in drkernel.agent.prompts

A task without a matching solution is fine (solution is None); a suite without tasks is not.
"""

from __future__ import annotations

import fnmatch
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from drkernel.env.config import CORRECTNESS_KEYS, TIMING_KEYS, EvalConfig, cpu_fast
from drkernel.env.tasks.task import Task

#: Allowed top-level keys of env.yaml (its two sections' keys come from drkernel.env.config).
ENV_YAML_KEYS = ("id", "description", "entry_point", "correctness", "timing", "prompt_template")
#: Keys that env.yaml no longer takes, with what to do instead.
REMOVED_KEYS = {"size_env_var": "the grader always sets DRKERNEL_TASK_SIZE; tasks may read it or not. "
                                "Delete the line"}
DEFAULT_PROMPT_TEMPLATE = "triton_kernelbench"


class SuiteError(ValueError):
    """The suite directory or its env.yaml is unusable (missing, malformed, no tasks)."""


@dataclass(frozen=True)
class SuiteTask:
    """One task of a suite: its id (the file stem), reference path and optional solution path."""

    id: str
    path: Path
    solution: Path | None = None

    @property
    def filename(self) -> str:
        """``<NN>_<name>.py``: candidates for this task use the same file name."""
        return self.path.name

    def task(self, entry_point: str = "Model") -> Task:
        return Task.from_file(self.path, entry_point=entry_point)


@dataclass
class Suite:
    """A loaded suite (see the module doc for the layout and env.yaml keys)."""

    id: str
    """Versioned id from env.yaml, e.g. ``single_ops-v1``."""
    description: str
    root: Path
    """The suite directory (absolute)."""
    config: dict[str, Any]
    """The parsed env.yaml."""
    tasks: list[SuiteTask] = field(default_factory=list)
    """Sorted by id."""

    @property
    def entry_point(self) -> str:
        return str(self.config.get("entry_point") or "Model")

    @property
    def prompt_template(self) -> str:
        return str(self.config.get("prompt_template") or DEFAULT_PROMPT_TEMPLATE)

    @property
    def solutions_dir(self) -> Path:
        return self.root / "solutions"

    def task(self, task_id: str) -> SuiteTask:
        for t in self.tasks:
            if t.id == task_id:
                return t
        raise KeyError(f"suite {self.id} has no task {task_id!r}")

    def select(self, pattern: str | None) -> list[SuiteTask]:
        """Tasks matching ``pattern``: comma-separated globs on the id (``0*,softmax``); a part
        without glob characters matches as a substring. None or empty selects every task."""
        if not pattern:
            return list(self.tasks)
        parts = [p.strip() for p in pattern.split(",") if p.strip()]

        def hit(task_id: str, part: str) -> bool:
            if any(c in part for c in "*?["):
                return fnmatch.fnmatchcase(task_id, part)
            return part in task_id

        return [t for t in self.tasks if any(hit(t.id, p) for p in parts)]

    def eval_config(self, device: str = "cpu", *, light: bool | None = None, **overrides: Any) -> EvalConfig:
        """The suite's grading protocol on ``device``.

        ``light`` (default: True on cpu) applies :func:`~drkernel.env.config.cpu_fast` (fewer timed
        calls: the interpreter's timings only rank kernels roughly anyway). ``overrides`` are
        EvalConfig fields and win over both env.yaml and ``light``; None values are ignored.
        """
        config = EvalConfig.from_env_yaml(self.config, device=device)
        if light if light is not None else device == "cpu":
            config = cpu_fast(config)
        kept = {k: v for k, v in overrides.items() if v is not None}
        return config.with_overrides(**kept).validate() if kept else config


def _read_env_yaml(path: Path) -> dict[str, Any]:
    import yaml

    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as exc:
        raise SuiteError(f"cannot read {path}: {exc}") from None
    except yaml.YAMLError as exc:
        raise SuiteError(f"{path} is not valid YAML: {str(exc).splitlines()[0]}") from None
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise SuiteError(f"{path} must hold a mapping, got {type(data).__name__}")
    return data


def validate_env_yaml(data: dict[str, Any], where: str = "env.yaml") -> None:
    """Raise :class:`SuiteError` naming every unknown key, and for malformed sections and values."""
    for key in sorted(set(data) & set(REMOVED_KEYS)):
        raise SuiteError(f"{where}: '{key}' is no longer an env.yaml key: {REMOVED_KEYS[key]}")
    unknown = sorted(set(data) - set(ENV_YAML_KEYS))
    if unknown:
        raise SuiteError(f"{where}: unknown key(s) {unknown}; allowed: {list(ENV_YAML_KEYS)}")
    for section, allowed in (("correctness", CORRECTNESS_KEYS), ("timing", TIMING_KEYS)):
        value = data.get(section)
        if value is None:
            continue
        if not isinstance(value, dict):
            raise SuiteError(f"{where}: '{section}' must be a mapping, got {type(value).__name__}")
        bad = sorted(set(value) - set(allowed))
        if bad:
            raise SuiteError(f"{where}: unknown key(s) {bad} in '{section}'; allowed: {list(allowed)}")
    if not isinstance(data.get("id"), str) or not data["id"].strip():
        raise SuiteError(f"{where}: 'id' (a versioned suite id such as my_suite-v0) is required")
    try:
        EvalConfig.from_env_yaml(data)
    except (ValueError, TypeError) as exc:
        raise SuiteError(f"{where}: {exc}") from None


def _task_files(directory: Path) -> list[Path]:
    if not directory.is_dir():
        return []
    return sorted((p for p in directory.glob("*.py") if p.is_file() and not p.name.startswith(("_", "."))),
                  key=lambda p: p.stem)


def load_suite(path: str | os.PathLike) -> Suite:
    """Load ``envs/<suite>/`` (or the path of its env.yaml). Raises :class:`SuiteError`."""
    root = Path(path)
    if root.is_file() and root.name in ("env.yaml", "env.yml"):
        root = root.parent
    if not root.exists():
        raise SuiteError(f"suite directory not found: {root}")
    if not root.is_dir():
        raise SuiteError(f"not a suite directory: {root}")
    root = root.resolve()
    env_yaml = root / "env.yaml"
    if not env_yaml.is_file():
        raise SuiteError(f"{root} has no env.yaml (expected envs/<suite>/env.yaml, tasks/, solutions/)")
    data = _read_env_yaml(env_yaml)
    validate_env_yaml(data, str(env_yaml))
    task_files = _task_files(root / "tasks")
    if not task_files:
        raise SuiteError(f"suite {data['id']} has no tasks: no *.py files in {root / 'tasks'}")
    solutions = {p.name: p for p in _task_files(root / "solutions")}
    tasks = [SuiteTask(id=p.stem, path=p, solution=solutions.get(p.name)) for p in task_files]
    return Suite(id=data["id"].strip(), description=str(data.get("description") or "").strip(), root=root,
                 config=data, tasks=tasks)


__all__ = ["Suite", "SuiteTask", "SuiteError", "load_suite", "validate_env_yaml", "ENV_YAML_KEYS"]
