"""The episode runner: prompt -> generate -> extract code -> grade -> feedback, for ``max_turns`` turns.

One episode, top to bottom (:func:`run_episode`)::

    head = [system?, first prompt (task source, rules, output format)]
    for turn in range(max_turns):
        messages = head + latest turns that fit the context      (drkernel.agent.context)
        reply    = await generate(messages, **sampling)           (any Generate backend)
        code     = the last python block defining ModelNew        (drkernel.agent.extract)
        result   = await grader.agrade(task, code)                (skipped when there is no code)
        reward   = drkernel.rewards.compute_reward(result)        (0 without code)
        feedback = compact verdict text in the feedback template  (drkernel.agent.feedback)
    meaningful-turn flags over the turn rewards                   (drkernel.rewards.meaningful_turn_mask)

Many episodes run concurrently on one event loop (:func:`run_episodes`): generation calls are
bounded by ``generation_concurrency`` and grading calls by the grader's ``capacity``; grading runs
in the grader's own threads or processes (``agrade``), never on the event loop.

The runner needs only two things from its environment (:class:`Scorer`): ``capacity`` and
``async agrade(task, source, *, seed, options) -> EvalResult``. Every
:class:`drkernel.env.grader.Grader` is one; a trainer can plug in a synthetic environment the same
way. ``task`` only needs ``name``, ``source`` and ``entry_point`` (a :class:`drkernel.env.Task`).

Failures: an exception from ``generate`` (after the backend's own retries) or from the grader (an
:class:`~drkernel.env.result.EnvironmentFailure`, never a verdict on the kernel) ends the episode
with ``Trajectory.error`` set; the turns before it are kept, and all of them are masked.
"""

from __future__ import annotations

import asyncio
import time
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from drkernel.agent.context import TokenCounter, approx_tokens, fit_context
from drkernel.agent.extract import locate_code
from drkernel.agent.feedback import MAX_FEEDBACK_CHARS, feedback_message, no_code_text, result_text
from drkernel.agent.prompts import render_prompt
from drkernel.agent.types import Generate, Message, Trajectory, Turn

if TYPE_CHECKING:
    from drkernel.env.result import EvalResult
    from drkernel.rewards import RewardConfig


class TaskLike(Protocol):
    """What the runner reads from a task (``drkernel.env.Task`` has it)."""

    name: str
    source: str
    entry_point: str


class Scorer(Protocol):
    """The part of the ``Grader`` protocol the runner uses; a synthetic environment implements it too."""

    @property
    def capacity(self) -> int:
        ...

    async def agrade(self, task: Any, source: str, *, seed: int | None = None,
                     options: dict[str, Any] | None = None) -> "EvalResult":
        ...


@dataclass
class EpisodeConfig:
    """How an episode runs."""

    max_turns: int = 3
    """Turns per episode (the loop does not stop early on success, as in the paper)."""
    prompt_template: str = "triton_kernelbench"
    """Template name in :mod:`drkernel.agent.prompts` (a suite's ``prompt_template``)."""
    system_prompt: str | None = None
    """Optional system message before the first prompt (always kept in the context)."""
    reward: "RewardConfig | None" = None
    """Reward settings (``drkernel.rewards.RewardConfig``); None = the recipe (speedup + PR)."""
    no_code_reward: float = 0.0
    """Reward of a reply without a code block (nothing is graded)."""
    max_context_tokens: int | None = None
    """Token budget of the prompt plus ``reserve_tokens``; None = never trim."""
    reserve_tokens: int = 0
    """Tokens kept free for the reply when trimming (usually the backend's max_tokens)."""
    keep_turns: int | None = None
    """Keep at most this many of the latest turns in the context; None = all that fit."""
    max_feedback_chars: int = MAX_FEEDBACK_CHARS
    """Cap on the feedback text of one turn (head and tail kept)."""
    sampling: dict[str, Any] = field(default_factory=dict)
    """Keyword arguments for every ``generate`` call (temperature, max_tokens, ...)."""
    grade_options: dict[str, Any] = field(default_factory=dict)
    """EvalConfig overrides for every grading call (e.g. ``{"profile": False}``)."""
    seed: int | None = None
    """Base of the per-turn grading seeds (crc32 of seed, task and turn index); None = random inputs."""

    def __post_init__(self) -> None:
        if self.max_turns < 1:
            raise ValueError(f"max_turns must be >= 1, got {self.max_turns}")
        if self.keep_turns is not None and self.keep_turns < 0:
            raise ValueError(f"keep_turns must be >= 0 or None, got {self.keep_turns}")

    @property
    def budget(self) -> int | None:
        """Prompt token budget: ``max_context_tokens - reserve_tokens``."""
        return None if self.max_context_tokens is None else self.max_context_tokens - self.reserve_tokens

    def grade_seed(self, task_name: str, index: int) -> int | None:
        if self.seed is None:
            return None
        return zlib.crc32(f"{self.seed}:{task_name}:{index}".encode())


class Limits:
    """Concurrency bounds shared by every episode of a run: generation calls and grading calls."""

    def __init__(self, generation: int, grading: int):
        if generation < 1 or grading < 1:
            raise ValueError(f"limits must be >= 1, got generation={generation}, grading={grading}")
        self.generation = asyncio.Semaphore(generation)
        self.grading = asyncio.Semaphore(grading)


TurnCallback = Callable[[Any, Turn], None]
"""Called with ``(task, turn)`` after each turn (progress bars, saving to disk)."""
Replay = Callable[[int], "Turn | None"]
"""Returns the stored turn with this global index, or None to run it (resuming a run)."""


def first_messages(task: TaskLike, config: EpisodeConfig) -> list[Message]:
    """The head of the dialogue: optional system message and the first user prompt."""
    head: list[Message] = []
    if config.system_prompt:
        head.append({"role": "system", "content": config.system_prompt})
    head.append({"role": "user", "content": render_prompt(config.prompt_template, task.source,
                                                          entry_point=task.entry_point)})
    return head


async def run_episode(
    task: TaskLike,
    generate: Generate,
    grader: Scorer,
    config: EpisodeConfig,
    *,
    context: Sequence[Turn] = (),
    start_index: int = 0,
    num_turns: int | None = None,
    limits: Limits | None = None,
    count_tokens: TokenCounter = approx_tokens,
    on_turn: TurnCallback | None = None,
    replay: Replay | None = None,
    finalize: bool = True,
) -> Trajectory:
    """Play one episode of ``task``; returns its :class:`Trajectory` (the new turns only).

    Args:
        task: has ``name``, ``source``, ``entry_point``.
        generate: async ``generate(messages, **config.sampling) -> Generation``.
        grader: a :class:`Scorer` (any ``Grader``).
        config: episode settings.
        context: earlier turns to continue from (test-time scaling keeps a selection of them).
        start_index: global index of the first new turn.
        num_turns: new turns to play; default ``config.max_turns - len(context)``.
        limits: shared concurrency bounds; default: one generation, ``grader.capacity`` gradings.
        count_tokens: prompt token counter for context trimming.
        on_turn: called after each turn.
        replay: stored turns by global index (their generation and grading are skipped).
        finalize: set the meaningful-turn flags at the end (callers that concatenate episodes
            call :func:`finalize_trajectory` themselves).
    """
    limits = limits or Limits(1, max(1, int(grader.capacity)))
    reward_of = _reward_fn(config.reward)
    n = config.max_turns - len(context) if num_turns is None else num_turns
    head = first_messages(task, config)
    history = [(t.assistant_message(), t.feedback_message()) for t in context]
    trajectory = Trajectory(task=task.name)
    for index in range(start_index, start_index + max(0, n)):
        turn = replay(index) if replay is not None else None
        if turn is None:
            turn = await _play_turn(task, generate, grader, config, head, history, index, limits, count_tokens,
                                    reward_of, trajectory)
            if turn is None:  # trajectory.error was set
                break
        trajectory.turns.append(turn)
        history.append((turn.assistant_message(), turn.feedback_message()))
        if on_turn is not None:
            on_turn(task, turn)
        if turn.status == "context_overflow":
            break
    if finalize:
        finalize_trajectory(trajectory)
    return trajectory


async def _play_turn(task: TaskLike, generate: Generate, grader: Scorer, config: EpisodeConfig,
                     head: list[Message], history: list[tuple[Message, Message]], index: int, limits: Limits,
                     count_tokens: TokenCounter, reward_of: Callable[["EvalResult"], float],
                     trajectory: Trajectory) -> Turn | None:
    fitted = fit_context(head, history, budget=config.budget, keep_turns=config.keep_turns, count=count_tokens)
    if fitted is None:
        text = "The task prompt alone exceeds the context budget: nothing was generated."
        return Turn(index=index, prompt=list(head), reply="", code=None, code_span=None, result=None,
                    reward=config.no_code_reward, feedback=text, status="context_overflow")
    messages, dropped = fitted

    seconds = {"generate": 0.0, "grade": 0.0}
    try:
        async with limits.generation:
            t0 = time.perf_counter()  # inside the bound: time spent generating, not queueing
            gen = await generate(messages, **config.sampling)
            seconds["generate"] = round(time.perf_counter() - t0, 6)
    except Exception as exc:  # the backend already retried: the episode ends, its turns are kept
        trajectory.error = f"generation failed at turn {index}: {type(exc).__name__}: {exc}"
        return None

    block = locate_code(gen.text, entry_point=task.entry_point)
    result = None
    if block is None:
        code, span, status, reward = None, None, "no_code", config.no_code_reward
        text = no_code_text(gen.finish_reason, task.entry_point)
    else:
        code, span, status = block.code.strip("\n") + "\n", (block.start, block.end), "graded"
        try:
            async with limits.grading:
                t0 = time.perf_counter()
                result = await grader.agrade(task, code, seed=config.grade_seed(task.name, index),
                                             options=config.grade_options or None)
                seconds["grade"] = round(time.perf_counter() - t0, 6)
        except Exception as exc:  # EnvironmentFailure, TaskError, a lost worker: never a kernel verdict
            trajectory.error = f"grading failed at turn {index}: {type(exc).__name__}: {exc}"
            return None
        reward = reward_of(result)
        text = result_text(result, config.max_feedback_chars)
    feedback = feedback_message(text, config.prompt_template, entry_point=task.entry_point)
    return Turn(index=index, prompt=messages, reply=gen.text, code=code, code_span=span, result=result,
                reward=reward, feedback=feedback, status=status, generation=gen, dropped_turns=dropped,
                seconds=seconds)


def turn_reward(result: "EvalResult", config: "RewardConfig | None" = None) -> float:
    """``drkernel.rewards.compute_reward`` of one result (the recipe's speedup reward with PR by default)."""
    return _reward_fn(config)(result)


def _reward_fn(config: "RewardConfig | None") -> Callable[["EvalResult"], float]:
    """The reward of one result under ``config``, with the function and its knobs looked up once
    (``compute_reward`` does both on every call): the scalar path of the same reward function."""
    from drkernel.rewards import RewardConfig, get_reward_fn

    cfg = config if config is not None else RewardConfig()
    fn, knobs = get_reward_fn(cfg.name), cfg.knobs()

    def reward(r: "EvalResult") -> float:
        return float(fn(bool(r.correct), r.speedup, r.coverage, bool(r.hacked), bool(r.compiled), **knobs))

    return reward


def finalize_trajectory(trajectory: Trajectory) -> Trajectory:
    """Set each turn's ``meaningful`` flag (``drkernel.rewards.meaningful_turn_mask``): a turn is
    trained unless an earlier turn had r > 0 and it has r <= 0; a failed trajectory is all masked."""
    if not trajectory.turns:
        return trajectory
    import torch

    from drkernel.rewards import meaningful_turn_mask

    rewards = torch.tensor([trajectory.turn_rewards], dtype=torch.float64)
    mask, _ = meaningful_turn_mask(rewards, failed=torch.tensor([trajectory.failed]))
    for turn, flag in zip(trajectory.turns, mask[0].tolist()):
        turn.meaningful = bool(flag)
    return trajectory


async def run_episodes(
    tasks: Sequence[TaskLike],
    generate: Generate,
    grader: Scorer,
    config: EpisodeConfig,
    *,
    generation_concurrency: int = 8,
    count_tokens: TokenCounter = approx_tokens,
    on_turn: TurnCallback | None = None,
) -> list[Trajectory]:
    """One episode per entry of ``tasks`` (repeat a task for several samples), all concurrently.

    Generation calls in flight are bounded by ``generation_concurrency``, grading calls by
    ``grader.capacity``. Returns the trajectories in the order of ``tasks``.
    """
    limits = Limits(generation_concurrency, max(1, int(grader.capacity)))
    return list(await asyncio.gather(*(
        run_episode(task, generate, grader, config, limits=limits, count_tokens=count_tokens, on_turn=on_turn)
        for task in tasks)))


def turn_tensors(trajectories: Sequence[Trajectory], max_turns: int | None = None) -> dict[str, Any]:
    """(N, T) tensors for a trainer: ``turn_rewards`` (float64, 0 where absent), ``turn_exists`` and
    ``turn_mask`` (bool; the meaningful-turn flags), back-padded to ``max_turns`` (default: the longest).
    Columns of :func:`drkernel.turns.turn_table`, which has the turns' verdicts and token spans too."""
    from drkernel.turns import turn_table

    table = turn_table(trajectories, max_turns)
    return {"turn_rewards": table.reward, "turn_exists": table.exists, "turn_mask": table.meaningful}


__all__ = ["EpisodeConfig", "Limits", "Scorer", "TaskLike", "first_messages", "run_episode", "run_episodes",
           "finalize_trajectory", "turn_reward", "turn_tensors"]
