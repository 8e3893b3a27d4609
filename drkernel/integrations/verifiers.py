"""The kernel environment for the ``verifiers`` library (0.4, its ``verifiers.v1`` API): multi-turn
episodes (kernel -> feedback -> revised kernel) played by drkernel's own turn loop.

    pip install -e '.[env,agent,verifiers]'
    # taskset id "drkernel-kernels" (the top-level module drkernel_kernels re-exports this one)
    config = KernelEnvConfig(taskset={"id": "drkernel-kernels", "tasks": "01_relu"}, max_turns=3, device="cuda")
    env = KernelEnv(config)
    async with env.serving():
        episode = await env.run_episode(task, vf.ModelContext(model=..., client=...))

or from verifiers' command line / a prime-rl orchestrator, with ``--env.taskset.id drkernel-kernels``
(the taskset module exports both the taskset and this env, so verifiers pairs them).

* **Tasks** (:class:`KernelTaskset`): one per task of a suite (default: the bundled
  ``envs/single_ops``), ``prompt`` = the agent's first prompt (:func:`drkernel.agent.episode.first_messages`),
  the reference source, entry point and name as task data.
* **Episode** (:meth:`KernelEnv.run`): :func:`drkernel.agent.episode.run_episode` itself, with
  its ``generate`` backed by the verifiers interaction (the first call takes the prompted task's
  opening reply, each later call sends the feedback message the loop built and takes the next
  reply), so extraction, grading (bounded by the grader's capacity across all episodes of the env),
  the reward of each turn (:mod:`drkernel.rewards`, the recipe by default), the feedback text and the
  meaningful-turn flags are the agent's, unchanged.
* **Rewards per turn** on the solver's trace: metrics ``turn_reward/<t>``, ``turn_passed/<t>``,
  ``turn_meaningful/<t>``, ``turns``; one reward ``kernel`` = ``sum_t r_t`` (the episode return
  ``G_0`` with gamma = 1, ``episode_reward="sum"``), or the last or best turn's. An environment
  failure (the grader broke) fails the episode, never a reward.
* **Grader**: a :class:`~drkernel.env.grader.LocalGrader` on ``device`` with the suite's protocol,
  or ``grader_url``: the grading service (:class:`~drkernel.serve.remote.RemoteGrader`).
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from drkernel.integrations._deps import require

vf = require("verifiers.v1", "drkernel.integrations.verifiers", extra="verifiers")

from pydantic import Field  # noqa: E402  (verifiers brings pydantic)

from drkernel.agent.types import Generation  # noqa: E402

DEFAULT_SUITE = str(Path(__file__).resolve().parents[2] / "envs" / "single_ops")
"""The bundled single-operator suite (in a source checkout)."""

TASKSET_ID = "drkernel-kernels"
"""The id verifiers loads the taskset (and this env) by: the top-level module ``drkernel_kernels``."""


class KernelData(vf.TaskData):
    """One kernel task: the reference program the policy rewrites with Triton."""

    task_code: str
    """The reference source (KernelBench format: Model, get_inputs, get_init_inputs)."""
    entry_point: str = "Model"
    """The reference class; the policy defines ``<entry_point>New``."""
    task_name: str = "task"
    """The task id (grading seeds and metrics are keyed by it)."""


class KernelTask(vf.Task[KernelData]):
    """A kernel task; its rewards are recorded per turn by :class:`KernelEnv`, not here."""

    @property
    def key(self) -> str:
        return f"{self.data.task_name}:{self.hash[:16]}"


class KernelTasksetConfig(vf.TasksetConfig):
    suite: str = DEFAULT_SUITE
    """Suite directory (env.yaml, tasks/)."""
    tasks: str = ""
    """Task id patterns (``Suite.select``: comma-separated globs or substrings); empty: every task."""
    template: str = ""
    """Prompt template name (:mod:`drkernel.agent.prompts`); empty: the suite's."""
    system_prompt: str | None = None
    """Optional system message before the first prompt."""


class KernelTaskset(vf.Taskset[KernelTask, KernelTasksetConfig]):
    """One :class:`KernelTask` per task of the suite, prompted with the agent's first prompt."""

    def load(self) -> list[KernelTask]:
        from drkernel.agent.prompts import suite_prompts

        prompts = suite_prompts(self.config.suite, tasks=self.config.tasks or None, template=self.config.template)
        return [KernelTask(KernelData(idx=i, id=p.task_id, name=p.task_id, task_code=p.source,
                                      entry_point=p.entry_point, task_name=p.task_id,
                                      system_prompt=self.config.system_prompt, prompt=p.text), self.config.task)
                for i, p in enumerate(prompts)]


class KernelEnvConfig(vf.EnvConfig):
    solver: vf.AgentConfig = vf.AgentConfig(harness={"id": "null"}, runtime={"type": "subprocess"})
    """The policy's seat: a plain chat loop (the ``null`` harness: it runs no code of the model's)
    in a local subprocess by default; the kernels themselves run only in drkernel's grader."""
    max_turns: int = Field(3, ge=1)
    """Turns per episode (the loop does not stop early on success, as in the paper)."""
    device: str = "cpu"
    """LocalGrader device: cpu (Triton interpreter, the suite's light protocol) or cuda."""
    grader_url: str = ""
    """Comma-separated ``drkernel serve`` URLs; set: grade through the service instead of locally."""
    grader_token_var: str = "DRKERNEL_SERVE_TOKEN"
    """Environment variable holding the service's bearer token."""
    capacity: int = 0
    """Gradings at once across the env's episodes (0: the grader's capacity)."""
    seed: int | None = None
    """Base of the hidden grading seeds (the agent's ``EpisodeConfig.seed``); None: random inputs."""
    grade_options: dict[str, Any] = Field(default_factory=dict)
    """EvalConfig overrides for every grading (e.g. ``{"profile": false}``)."""
    reward: dict[str, Any] = Field(default_factory=dict)
    """``drkernel.rewards.RewardConfig`` fields; empty: the recipe (speedup + PR)."""
    episode_reward: str = "sum"
    """The trace's ``kernel`` reward: ``sum`` of the turn rewards (G_0), ``last`` or ``max``."""
    max_feedback_chars: int = 2000
    """Cap on the feedback text of one turn."""


class InteractionGenerate:
    """The agent's ``Generate`` over a verifiers interaction: the first call takes the prompted
    task's opening reply, each later call sends the conversation's last message (the feedback the
    turn loop built) as the next user turn. The harness keeps the conversation, so ``messages``
    must be the loop's full history (no context trimming)."""

    def __init__(self, interaction: Any):
        self.interaction = interaction
        self.calls = 0

    async def __call__(self, messages: list[dict[str, str]], **sampling: Any) -> Generation:
        if self.calls == 0:
            segment = await self.interaction.turn()
        else:
            segment = await self.interaction.turn(messages[-1]["content"])
        self.calls += 1
        if segment.terminated:
            trace = self.interaction.trace
            raise RuntimeError(f"the solver's run ended before turn {self.calls - 1} "
                               f"(stop condition: {getattr(trace, 'stop_condition', None)})")
        return Generation(text=segment.last_reply)


class KernelEnv(vf.Env[KernelEnvConfig]):
    """Multi-turn kernel episodes through drkernel's turn loop (module doc)."""

    def __init__(self, config: KernelEnvConfig) -> None:
        super().__init__(config)
        from drkernel.rewards import RewardConfig

        if config.episode_reward not in ("sum", "last", "max"):
            raise ValueError(f"episode_reward must be sum, last or max, got {config.episode_reward!r}")
        self.reward_config = RewardConfig(**config.reward)
        self.grader: Any = None
        self._limits: Any = None
        self._trajectories: dict[str, Any] = {}

    def episode_config(self, task: KernelTask) -> Any:
        from drkernel.agent.episode import EpisodeConfig

        return EpisodeConfig(max_turns=self.config.max_turns, system_prompt=task.data.system_prompt,
                             reward=self.reward_config, seed=self.config.seed,
                             grade_options=dict(self.config.grade_options),
                             max_feedback_chars=self.config.max_feedback_chars,
                             prompt_template=self.taskset.config.template or _suite_template(self.taskset.config.suite))

    def build_grader(self) -> Any:
        """The grading service's client when ``grader_url`` is set, else a LocalGrader."""
        if self.config.grader_url:
            import os

            from drkernel.serve.remote import RemoteGrader

            urls = [u.strip() for u in self.config.grader_url.split(",") if u.strip()]
            return RemoteGrader(urls, token=os.environ.get(self.config.grader_token_var) or None)
        from drkernel.env import LocalGrader
        from drkernel.env.tasks.suite import load_suite

        config = load_suite(self.taskset.config.suite).eval_config(self.config.device)
        return LocalGrader(config, capacity=self.config.capacity or None)

    async def start(self) -> None:
        from drkernel.agent.episode import Limits

        self.grader = await asyncio.to_thread(self.build_grader)
        capacity = self.config.capacity or max(1, int(self.grader.capacity))
        self._limits = Limits(generation=1 << 16, grading=capacity)

    async def stop(self) -> None:
        if self.grader is not None:
            grader, self.grader = self.grader, None
            await asyncio.to_thread(grader.close)

    async def run(self, task: KernelTask, agents: Any) -> None:
        from drkernel.agent.episode import run_episode
        from drkernel.env.tasks.task import Task

        if self.grader is None:
            raise RuntimeError("KernelEnv has no grader: run episodes inside `async with env.serving():`")
        ref = Task.from_source(task.data.task_code, name=task.data.task_name, entry_point=task.data.entry_point)
        async with agents.solver.interaction(task) as interaction:
            trajectory = await run_episode(ref, InteractionGenerate(interaction), self.grader,
                                           self.episode_config(task), limits=self._limits)
            trace_id = interaction.trace.id
        if trajectory.error:  # a failed generation or grading (never a verdict): the episode failed
            raise RuntimeError(trajectory.error)
        self._trajectories[trace_id] = trajectory  # its rewards are recorded by finalize()

    async def finalize(self, task: KernelTask, episode: Any) -> None:
        for trace in episode.traces:
            trajectory = self._trajectories.pop(trace.id, None)
            if trajectory is None:
                continue
            rewards = trajectory.turn_rewards
            for turn in trajectory.turns:
                trace.record_metric(f"turn_reward/{turn.index}", turn.reward)
                trace.record_metric(f"turn_passed/{turn.index}", float(bool(turn.result and turn.result.passed)))
                trace.record_metric(f"turn_meaningful/{turn.index}", float(bool(turn.meaningful)))
            trace.record_metric("turns", float(len(rewards)))
            total = {"sum": sum(rewards), "last": rewards[-1] if rewards else 0.0,
                     "max": max(rewards, default=0.0)}[self.config.episode_reward]
            trace.record_reward("kernel", total)

    def trajectory_of(self, trace_id: str) -> Any:
        """The drkernel Trajectory of a trace not yet finalized (tests, debugging)."""
        return self._trajectories.get(trace_id)


def _suite_template(suite: str) -> str:
    from drkernel.env.tasks.suite import load_suite

    return load_suite(suite).prompt_template


__all__ = ["KernelData", "KernelEnv", "KernelEnvConfig", "KernelTask", "KernelTaskset", "KernelTasksetConfig",
           "InteractionGenerate", "TASKSET_ID"]
