"""The kernel reward for TRL's ``GRPOTrainer`` (TRL 1.16): reward functions and a dataset builder.

    from drkernel.env import LocalGrader, EvalConfig
    from drkernel.integrations.trl import KernelReward, build_dataset

    dataset = build_dataset("envs/single_ops")                 # prompt + task_code, task_name, entry_point
    reward = KernelReward(LocalGrader(EvalConfig(device="cuda")))
    trainer = GRPOTrainer(model=..., reward_funcs=reward, train_dataset=dataset, args=GRPOConfig(...))

    # or the recipe's terms as separate functions, summed by TRL with the matching weights:
    trainer = GRPOTrainer(..., reward_funcs=reward.components(),
                          args=GRPOConfig(reward_weights=reward.component_weights(), ...))

TRL calls a reward function as ``f(prompts=..., completions=..., completion_ids=..., **columns)``,
where ``columns`` are the dataset's other columns (one value per completion), plus
``trainer_state``, ``log_extra`` and ``log_metric``; it wants one float per completion.
A completion is a string (plain dataset) or a list of messages (conversational: the assistant
messages' text is read). For each completion the reward

1. extracts the kernel: the last python block defining ``class <entry_point>New``
   (:func:`drkernel.agent.extract.locate_code`, the agent's extractor); none: ``no_code_reward``;
2. grades it through any :class:`~drkernel.env.grader.Grader` (``LocalGrader``, ``RayGrader``,
   ``RemoteGrader`` for the HTTP service), at most ``grader.capacity`` at once
   (:class:`~drkernel.integrations._grading.BatchGrader`); the hidden seed is the agent's
   ``EpisodeConfig(seed=seed).grade_seed(task_name, 0)`` (None: fresh random inputs);
3. scores it with :mod:`drkernel.rewards` (default: the recipe's speedup reward with PR)::

       R = w_c c + w_p c s~ + W_cov c cov,  s~ = min(s, upper) (0 below lower);  R = penalty if hacked

   with ``c`` = compiled and correct and not hacked.

The components are the recipe's terms, so that TRL's weighted sum with
:meth:`KernelReward.component_weights` ``[w_c, w_p, W_cov, penalty]`` is exactly ``R``::

    kernel_correct  = c                kernel_speedup  = c s~
    kernel_coverage = c cov            kernel_hack     = [hacked]

(a hacked kernel has ``c = 0``, so the sum is ``penalty``). They share one grading per completion
with the total (:class:`BatchGrader` remembers results), so logging them with weight 0 beside the
total costs nothing. An environment failure (the grader is broken) raises: it is never a reward.

This module needs no TRL to import or to call; :func:`build_dataset` needs ``datasets``
(``pip install -e '.[trl]'``).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from drkernel.integrations._grading import BatchGrader, GradeItem

if TYPE_CHECKING:
    from drkernel.env.result import EvalResult
    from drkernel.rewards import RewardConfig

COLUMNS = ("task_code", "task_name", "entry_point")
"""The dataset columns the reward reads (besides TRL's ``prompts`` and ``completions``)."""


def completion_text(completion: Any) -> str:
    """The text of one TRL completion: a string as it is, a conversational completion's
    assistant messages joined (tool results and other roles left out)."""
    if isinstance(completion, str):
        return completion
    if isinstance(completion, dict):
        completion = [completion]
    parts = []
    for message in completion or []:
        if isinstance(message, dict) and message.get("role", "assistant") == "assistant":
            content = message.get("content") or ""
            if isinstance(content, list):  # content parts: keep the text ones
                content = "".join(p.get("text", "") for p in content if isinstance(p, dict))
            parts.append(str(content))
    return "\n".join(parts)


def _column(kwargs: dict[str, Any], name: str, n: int, default: Any = None) -> list[Any]:
    values = kwargs.get(name)
    if values is None:
        if default is None:
            raise KeyError(f"the kernel reward needs the dataset column {name!r} (one value per prompt); build "
                           f"the dataset with drkernel.integrations.trl.build_dataset, which adds {list(COLUMNS)}")
        return [default] * n
    values = list(values)
    if len(values) != n:
        raise ValueError(f"column {name!r} has {len(values)} values for {n} completions")
    return values


class KernelReward:
    """The profiling-based kernel reward as a TRL reward function (module doc for the contract).

    Args:
        grader: any :class:`~drkernel.env.grader.Grader`; not closed by :meth:`close` (its owner
            closes it), unless ``own_grader=True``.
        reward: the reward function and knobs (:class:`drkernel.rewards.RewardConfig`); None = the
            recipe (speedup + PR).
        seed: base of the hidden grading seeds (``crc32(f"{seed}:{task_name}:0")``, the agent's
            first-turn seed); None = fresh random inputs for every grading.
        grade_options: EvalConfig overrides for every grading (e.g. ``{"profile": False}``).
        no_code_reward: reward of a completion without a kernel (nothing is graded).
        concurrency: gradings in flight; default ``grader.capacity``.
        log: report ``kernel/*`` rates through TRL's ``log_metric`` and a ``kernel_verdict``
            column through ``log_extra`` (when TRL passes them).
    """

    __name__ = "kernel_reward"

    def __init__(self, grader: Any, *, reward: "RewardConfig | None" = None, seed: int | None = None,
                 grade_options: dict[str, Any] | None = None, no_code_reward: float = 0.0,
                 concurrency: int | None = None, log: bool = True, own_grader: bool = False):
        from drkernel.rewards import RewardConfig

        self.grader = grader
        self.reward_config = reward if reward is not None else RewardConfig()
        self.seed = seed
        self.grade_options = dict(grade_options or {})
        self.no_code_reward = float(no_code_reward)
        self.log = log
        self.own_grader = own_grader
        self.batch = BatchGrader(grader, concurrency=concurrency)
        self._tasks: dict[tuple[str, str, str], Any] = {}
        self.last: list[dict[str, Any]] = []
        """Per completion of the last call: ``code`` (or None), ``result`` (EvalResult or None), ``reward``."""

    # -- the reward function ---------------------------------------------------------------------
    def __call__(self, prompts: Sequence[Any] | None = None, completions: Sequence[Any] = (), **kwargs: Any
                 ) -> list[float]:
        """One reward per completion: ``R`` of its graded kernel, ``no_code_reward`` without one."""
        graded = self.grade(completions, **kwargs)
        rewards = [self._total(code, result) for code, result in graded]
        self.last = [{"code": code, "result": result, "reward": r} for (code, result), r in zip(graded, rewards)]
        if self.log:
            self._log(graded, kwargs)
        return rewards

    def grade(self, completions: Sequence[Any], **columns: Any) -> list[tuple[str | None, "EvalResult | None"]]:
        """``(code, result)`` per completion (``(None, None)`` without a kernel), graded concurrently."""
        from drkernel.agent.extract import locate_code

        n = len(completions)
        task_codes = _column(columns, "task_code", n)
        entry_points = _column(columns, "entry_point", n, default="Model")
        names = _column(columns, "task_name", n, default="task")
        codes: list[str | None] = []
        items: list[GradeItem] = []
        for completion, task_code, entry_point, name in zip(completions, task_codes, entry_points, names):
            block = locate_code(completion_text(completion), entry_point=entry_point)
            code = None if block is None else block.code.strip("\n") + "\n"
            codes.append(code)
            if code is not None:
                items.append(GradeItem(self._task(task_code, entry_point, name), code, self.grade_seed(name),
                                       self.grade_options))
        results = iter(self.batch.grade_many(items))
        return [(code, next(results) if code is not None else None) for code in codes]

    def grade_seed(self, task_name: str) -> int | None:
        """The hidden seed of ``task_name``'s gradings: the agent's first-turn seed (None: random)."""
        from drkernel.agent.episode import EpisodeConfig

        return EpisodeConfig(seed=self.seed).grade_seed(task_name, 0)

    def _task(self, task_code: str, entry_point: str, name: str) -> Any:
        key = (task_code, entry_point, name)
        task = self._tasks.get(key)
        if task is None:
            from drkernel.env.tasks.task import Task

            task = self._tasks[key] = Task.from_source(task_code, name=name, entry_point=entry_point)
        return task

    def _total(self, code: str | None, result: "EvalResult | None") -> float:
        if result is None:
            return self.no_code_reward
        from drkernel.agent.episode import turn_reward

        return turn_reward(result, self.reward_config)

    def _log(self, graded: list[tuple[str | None, "EvalResult | None"]], columns: dict[str, Any]) -> None:
        n = max(1, len(graded))
        results = [r for _, r in graded if r is not None]
        log_metric: Callable[[str, float], None] | None = columns.get("log_metric")
        log_extra: Callable[[str, list], None] | None = columns.get("log_extra")
        if callable(log_metric):
            log_metric("kernel/no_code_rate", sum(r is None for _, r in graded) / n)
            log_metric("kernel/compile_rate", sum(bool(r.compiled) for r in results) / n)
            log_metric("kernel/pass_rate", sum(bool(r.passed) for r in results) / n)
            log_metric("kernel/hack_rate", sum(bool(r.hacked) for r in results) / n)
        if callable(log_extra):
            log_extra("kernel_verdict", [verdict(r) for _, r in graded])

    # -- components ------------------------------------------------------------------------------
    def components(self) -> list[Callable[..., list[float]]]:
        """``[kernel_correct, kernel_speedup, kernel_coverage, kernel_hack]`` (module doc); with
        :meth:`component_weights` TRL's weighted sum equals the total reward."""
        return [self.correct, self.speedup, self.coverage, self.hack]

    def component_weights(self) -> list[float]:
        """``[w_c, w_p, W_cov, penalty]`` of the speedup reward (the recipe); other reward
        functions are not a weighted sum of these terms (use the total instead)."""
        cfg = self.reward_config
        if cfg.name != "speedup":
            raise ValueError(f"component weights exist for the 'speedup' reward only, not {cfg.name!r}: "
                             f"pass the KernelReward itself as the reward function")
        return [cfg.correct_weight, cfg.performance_weight, cfg.coverage_weight if cfg.coverage_enable else 0.0,
                cfg.penalty]

    def _component(self, name: str, term: Callable[["EvalResult"], float]) -> Callable[..., list[float]]:
        def fn(prompts: Sequence[Any] | None = None, completions: Sequence[Any] = (), **kwargs: Any) -> list[float]:
            return [0.0 if result is None else term(result) for _, result in self.grade(completions, **kwargs)]

        fn.__name__ = fn.__qualname__ = name
        fn.__doc__ = f"{name}: a term of drkernel's kernel reward (drkernel.integrations.trl)."
        return fn

    @property
    def correct(self) -> Callable[..., list[float]]:
        """``c``: 1.0 when the kernel compiled, is correct and is not hacked."""
        return self._component("kernel_correct", lambda r: float(r.passed))

    @property
    def speedup(self) -> Callable[..., list[float]]:
        """``c s~``: the clipped speedup of a passing kernel (``min(s, upper)``, 0 below ``lower``)."""
        cfg = self.reward_config

        def term(r: "EvalResult") -> float:
            s = r.speedup if r.speedup is not None and math.isfinite(r.speedup) else 0.0
            s = min(max(s, 0.0), cfg.speedup_upper)
            return float(r.passed) * (0.0 if s < cfg.speedup_lower else s)

        return self._component("kernel_speedup", term)

    @property
    def coverage(self) -> Callable[..., list[float]]:
        """``c cov``: the share of the passing kernel's device time in its own Triton kernels (PR)."""
        return self._component("kernel_coverage", lambda r: float(r.passed) * (
            r.coverage if r.coverage is not None and math.isfinite(r.coverage) else 0.0))

    @property
    def hack(self) -> Callable[..., list[float]]:
        """``[hacked]``: 1.0 when a hacking check fired (its weight is the penalty)."""
        return self._component("kernel_hack", lambda r: float(bool(r.hacked)))

    def close(self) -> None:
        """Stop the grading loop; close the grader too when this object owns it."""
        self.batch.close()
        if self.own_grader:
            self.grader.close()


def verdict(result: "EvalResult | None") -> str:
    """One word per completion: ``no_code``, ``passed``, ``hacked``, ``compile_failed`` or ``incorrect``."""
    if result is None:
        return "no_code"
    if result.passed:
        return "passed"
    if result.hacked:
        return "hacked"
    return "incorrect" if result.compiled else "compile_failed"


def build_rows(suite: Any, *, tasks: str | None = None, conversational: bool = True, template: str | None = None,
               system_prompt: str | None = None, repeat: int = 1) -> list[dict[str, Any]]:
    """One row per task of ``suite`` (a path or a loaded :class:`~drkernel.env.tasks.suite.Suite`):
    ``prompt`` (the agent's first prompt: ``[{"role": "user", ...}]``, with ``system_prompt`` first,
    or its text when ``conversational=False``) plus :data:`COLUMNS`, ``task_id`` and ``suite``.
    ``tasks``: the suite's id patterns (``Suite.select``); ``repeat``: each row that many times."""
    from drkernel.agent.prompts import suite_prompts

    rows = []
    for p in suite_prompts(suite, tasks=tasks, template=template):
        if conversational:
            prompt: Any = ([{"role": "system", "content": system_prompt}] if system_prompt else []) + [
                {"role": "user", "content": p.text}]
        else:
            prompt = f"{system_prompt}\n\n{p.text}" if system_prompt else p.text
        rows.append({"prompt": prompt, "task_code": p.source, "task_name": p.task_id, "entry_point": p.entry_point,
                     "task_id": p.task_id, "suite": p.suite_id})
    return [dict(row) for row in rows for _ in range(max(1, repeat))]


def build_dataset(suite: Any, **kwargs: Any) -> Any:
    """:func:`build_rows` as a ``datasets.Dataset`` (what ``GRPOTrainer`` takes as ``train_dataset``)."""
    datasets = _require("datasets", "drkernel.integrations.trl.build_dataset")
    return datasets.Dataset.from_list(build_rows(suite, **kwargs))


def _require(module: str, purpose: str) -> Any:
    from drkernel.integrations._deps import require

    return require(module, purpose, extra="trl")


__all__ = ["COLUMNS", "KernelReward", "build_dataset", "build_rows", "completion_text", "verdict"]
