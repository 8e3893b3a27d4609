"""drkernel's multi-turn kernel episodes inside the real verifiers 0.4 (``verifiers.v1``): the
taskset and env load by id, an episode runs through verifiers' own machinery (the ``null`` chat
harness in a subprocess runtime, its interception server relaying model calls to a scripted
OpenAI-compatible policy), and its per-turn rewards, feedback and prompts are exactly those of
``drkernel.agent.run_episode`` with the same policy, grader protocol and seed."""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path

import pytest

pytest.importorskip("verifiers.v1", reason="needs the 'verifiers' extra: pip install -e '.[verifiers]'")

import verifiers.v1 as vf  # noqa: E402
from verifiers.v1.configs.client import EvalClientConfig  # noqa: E402
from verifiers.v1.utils.loaders import environment_class, taskset_class  # noqa: E402

from drkernel.agent.episode import first_messages, run_episode  # noqa: E402
from drkernel.agent.types import Generation  # noqa: E402
from drkernel.env.tasks.task import Task  # noqa: E402
from drkernel.integrations.verifiers import KernelEnv, KernelEnvConfig, KernelTaskset  # noqa: E402
from tests.agent.scripted_server import ScriptedServer  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
FIX = REPO / "tests" / "env" / "fixtures" / "candidates"
KERNELS = [(FIX / "wrong" / "relu_identity.py").read_text(),                   # turn 0: wrong on randn
           (REPO / "envs" / "single_ops" / "solutions" / "01_relu.py").read_text(),  # turn 1: passes
           (FIX / "hacks" / "decoy_kernel.py").read_text()]                     # turn 2: never launches
NO_TIMING = {"measure_performance": False, "profile": False}


def policy(messages: list[dict]) -> str:
    """The scripted model: its t-th reply (t = user messages seen - 1) is KERNELS[t]."""
    t = sum(1 for m in messages if m["role"] == "user") - 1
    return f"Turn {t}.\n\n```python\n{KERNELS[min(t, 2)].strip()}\n```\n"


def config(**kw) -> KernelEnvConfig:
    return KernelEnvConfig(taskset={"id": "drkernel-kernels", "tasks": "01_relu"}, max_turns=3, seed=0,
                           grade_options=NO_TIMING, capacity=2,
                           solver={"harness": {"id": "null"}, "runtime": {"type": "subprocess"}}, **kw)


def test_the_taskset_and_env_load_by_id():
    assert taskset_class("drkernel-kernels") is KernelTaskset
    assert environment_class("drkernel-kernels") is KernelEnv
    env = KernelEnv(config())
    (task,) = list(env.taskset.load())
    assert task.data.task_name == "01_relu" and task.data.entry_point == "Model"
    ref = Task.from_source(task.data.task_code, name="01_relu")
    assert task.data.prompt == first_messages(ref, env.episode_config(task))[-1]["content"]
    with pytest.raises(ValueError, match="episode_reward"):
        KernelEnv(config(episode_reward="mean"))


def test_a_missing_extra_names_its_pip_install():
    from drkernel.integrations._deps import require

    with pytest.raises(ImportError, match=r"pip install -e '\.\[verifiers\]'"):
        require("no_such_module_drkernel", "x", extra="verifiers")


@pytest.mark.slow
def test_a_verifiers_episode_is_drkernels_episode(monkeypatch):
    # verifiers runs its chat harness with uv; the one in this environment (the 'verifiers' extra)
    monkeypatch.setenv("PATH", f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")
    env = KernelEnv(config())
    (task,) = list(env.taskset.load())

    async def play():
        with ScriptedServer(policy) as server:
            ctx = vf.ModelContext(model="scripted", client=EvalClientConfig(base_url=server.url,
                                                                            api_key_var="DRKERNEL_TEST_KEY"))
            async with env.serving():
                episode = await env.run_episode(task, ctx)
            return episode, server.requests

    episode, requests = asyncio.run(play())
    assert episode.ok, episode.errors
    (trace,) = episode.traces
    turns = [trace.metrics[f"turn_reward/{t}"] for t in range(3)]
    assert turns == [0.0, 0.5, 0.0]                         # wrong, the solution (0.5 c: no timing), a hack
    assert [trace.metrics[f"turn_meaningful/{t}"] for t in range(3)] == [1.0, 1.0, 0.0]  # r <= 0 after r > 0
    assert trace.rewards["kernel"].score == 0.5 and trace.reward == 0.5   # sum_t r_t
    assert trace.num_turns == 3 and len(requests) == 3

    # the same episode through drkernel's own loop, with the same policy, protocol and seed
    async def direct():
        async def generate(messages, **sampling):
            return Generation(text=policy(messages))

        grader = env.build_grader()
        try:
            ref = Task.from_source(task.data.task_code, name=task.data.task_name)
            return await run_episode(ref, generate, grader, env.episode_config(task))
        finally:
            grader.close()

    trajectory = asyncio.run(direct())
    assert trajectory.turn_rewards == turns
    assert [t.result.hacked for t in trajectory.turns] == [False, False, True]
    # what the model saw through verifiers: the agent's first prompt, then the agent's feedback turns
    seen = [[(m["role"], m["content"]) for m in r["messages"] if m["role"] != "system"] for r in requests]
    assert seen[0] == [("user", task.data.prompt)]
    assert [content for role, content in seen[2] if role == "user"] == [
        task.data.prompt, trajectory.turns[0].feedback, trajectory.turns[1].feedback]
