"""Tests for drkernel/agent/episode.py, context.py and feedback.py: the turn loop, its failure
paths, context trimming, concurrency bounds and the trainer-facing fields."""

import asyncio

import pytest

from drkernel.agent.context import approx_tokens, fit_context
from drkernel.agent.episode import EpisodeConfig, first_messages, run_episode, run_episodes, turn_tensors
from drkernel.agent.extract import locate_code, token_code_mask
from drkernel.agent.feedback import cap_text, no_code_text
from drkernel.agent.types import Generation, Trajectory
from drkernel.env.result import EnvironmentFailure
from drkernel.env.tasks.task import Task
from tests.agent.marker_scorer import MarkerScorer, kernel
from tests.agent.scripted_server import fenced

TASK = Task.from_source("import torch\n\nclass Model(torch.nn.Module):\n    pass\n", name="t")


class Scripted:
    """In-process generator: replies in order; records the messages it saw and peak concurrency."""

    def __init__(self, replies, delay_s=0.0, fail_at=None):
        self.replies, self.delay_s, self.fail_at = list(replies), delay_s, fail_at
        self.seen, self.in_flight, self.peak = [], 0, 0

    async def __call__(self, messages, **sampling):
        self.seen.append((messages, sampling))
        if self.fail_at is not None and len(self.seen) > self.fail_at:
            raise ConnectionError("server went away")
        self.in_flight += 1
        self.peak = max(self.peak, self.in_flight)
        try:
            await asyncio.sleep(self.delay_s)
        finally:
            self.in_flight -= 1
        text = self.replies[min(len(self.seen) - 1, len(self.replies) - 1)]
        return Generation(text=text, token_ids=[1, 2, 3], logprobs=[-0.1, -0.2, -0.3], finish_reason="stop")


def play(gen, scorer=None, **cfg):
    return asyncio.run(run_episode(TASK, gen, scorer or MarkerScorer(), EpisodeConfig(**cfg)))


def test_turn_loop_records_everything():
    gen = Scripted([fenced(kernel(verdict_="wrong"), "Plan: one pass."), fenced(kernel(2.0))])
    tr = play(gen, max_turns=2, sampling={"temperature": 0.7})
    t0, t1 = tr.turns
    assert [t.index for t in tr.turns] == [0, 1] and not tr.failed
    assert t0.generation.token_ids == [1, 2, 3] and t0.generation.logprobs == [-0.1, -0.2, -0.3]
    assert gen.seen[0][1] == {"temperature": 0.7}
    # turn 2 saw: first prompt, reply 1, feedback 1
    assert t1.prompt == first_messages(TASK, EpisodeConfig()) + [t0.assistant_message(), t0.feedback_message()]
    assert t0.result.correct is False and t1.result.passed and t1.reward == pytest.approx(0.5 + 1.0 + 0.5)
    assert t0.reply[t0.code_span[0]:t0.code_span[1]].strip() == t0.code.strip()
    assert t0.reply[:t0.code_span[0]].startswith("Plan: one pass.")
    assert tr.turn_mask == [True, True] and tr.best_turn() is t1
    # round trip through JSON-ready dicts
    back = Trajectory.from_dict(tr.to_dict())
    assert back.turn_rewards == tr.turn_rewards and back.turns[1].result.speedup == 2.0
    assert back.turns[0].code_span == t0.code_span and back.turns[0].generation.logprobs == [-0.1, -0.2, -0.3]


def test_no_code_is_not_graded_and_says_why():
    scorer = MarkerScorer()
    gen = Scripted(["<think>```python\nclass ModelNew: pass\n```</think> Still thinking."])
    tr = play(gen, scorer, max_turns=2)
    assert scorer.calls == [] and [t.status for t in tr.turns] == ["no_code", "no_code"]
    assert all(t.reward == 0.0 and t.result is None and t.code_span is None for t in tr.turns)
    assert "no code found" in tr.turns[0].feedback
    assert "cut off" in no_code_text("length") and "cut off" not in no_code_text("stop")


def test_generation_failure_keeps_turns_and_masks_them():
    gen = Scripted([fenced(kernel(1.5))], fail_at=1)
    tr = play(gen, max_turns=3)
    assert len(tr.turns) == 1 and tr.failed
    assert "generation failed at turn 1" in tr.error and "server went away" in tr.error
    assert tr.turn_mask == [False]  # a failed trajectory is not trained on


def test_environment_failure_is_never_a_verdict():
    class Broken(MarkerScorer):
        async def agrade(self, task, source, **kw):
            raise EnvironmentFailure("worker could not start")

    tr = play(Scripted([fenced(kernel(1.5))]), Broken(), max_turns=2)
    assert tr.turns == [] and "grading failed at turn 0: EnvironmentFailure" in tr.error


def test_context_is_trimmed_to_first_prompt_and_latest_turns():
    head = [{"role": "user", "content": "x" * 400}]  # 104 tokens by the estimate
    turns = [({"role": "assistant", "content": f"r{i}" + "y" * 198}, {"role": "user", "content": "z" * 200})
             for i in range(5)]  # each turn: 2 * (50 + 4) = 108 tokens
    assert approx_tokens(head) == 104
    msgs, dropped = fit_context(head, turns, budget=104 + 2 * 108)
    assert dropped == 3 and msgs[0] is head[0] and msgs[1]["content"].startswith("r3")
    assert fit_context(head, turns, budget=None) == (head + [m for t in turns for m in t], 0)
    msgs, dropped = fit_context(head, turns, budget=10_000, keep_turns=1)
    assert dropped == 4 and msgs[1]["content"].startswith("r4")
    assert fit_context(head, turns, budget=50) is None
    # a tokenizer-backed counter is called on the real messages
    calls = []

    def count(messages):
        calls.append(len(messages))
        return 10 * len(messages)

    msgs, dropped = fit_context(head, turns, budget=35, count=count)
    assert dropped == 4 and len(msgs) == 3 and calls


def test_episode_trims_and_overflows():
    gen = Scripted([fenced(kernel(verdict_="wrong")) + "w" * 4000])
    tr = play(gen, max_turns=3, max_context_tokens=2200, reserve_tokens=100)
    assert [t.dropped_turns for t in tr.turns] == [0, 0, 1]
    assert len(tr.turns[2].prompt) == 3  # first prompt + the latest turn
    tr = play(Scripted(["hi"]), max_turns=3, max_context_tokens=50)
    assert [t.status for t in tr.turns] == ["context_overflow"] and tr.turns[0].reply == ""


def test_many_episodes_bounded_concurrency():
    gen = Scripted([fenced(kernel(1.0))], delay_s=0.01)
    scorer = MarkerScorer(capacity=3, delay_s=0.1)  # gradings pile up behind the cap
    trs = asyncio.run(run_episodes([TASK] * 8, gen, scorer, EpisodeConfig(max_turns=2), generation_concurrency=2))
    assert len(trs) == 8 and all(len(t.turns) == 2 for t in trs)
    assert gen.peak == 2 and scorer.peak == 3
    tensors = turn_tensors(trs + [Trajectory("empty")], max_turns=3)
    assert tensors["turn_rewards"].shape == (9, 3)
    assert tensors["turn_exists"][0].tolist() == [True, True, False] and not tensors["turn_exists"][8].any()
    assert tensors["turn_rewards"][0, 0].item() == pytest.approx(1.5)


def test_feedback_is_capped_head_and_tail():
    text = "START " + "e" * 5000 + " END"
    capped = cap_text(text, 500)
    assert capped.startswith("START") and capped.endswith("END") and "characters cut" in capped
    assert len(capped) < 600 and cap_text("short", 500) == "short"


def test_code_span_and_token_mask():
    reply = "Reasoning here.\r\n```python\r\nclass ModelNew:\r\n    pass\r\n```\r\nbye"
    block = locate_code(reply)
    assert reply[block.start:block.end] == "class ModelNew:\r\n    pass"
    pieces = ["Reason", "ing here.\r\n```", "python\r\n", "class", " ModelNew:\r\n", "    pass\r\n", "```", "\r\nbye"]
    assert "".join(pieces) == reply
    assert token_code_mask(pieces, (block.start, block.end)) == [False, False, False, True, True, True, False, False]
    assert token_code_mask(pieces, None) == [False] * len(pieces)


def test_turn_reward_matches_compute_reward():
    from drkernel.agent.episode import turn_reward
    from drkernel.env.result import EvalResult
    from drkernel.rewards import RewardConfig, compute_reward

    results = [EvalResult(compiled=True, correct=True, speedup=2.0, coverage=0.6),
               EvalResult(compiled=True, correct=True, speedup=None, coverage=None),
               EvalResult(compiled=True, correct=True, speedup=5.0, coverage=0.2, hacked=True),
               EvalResult(compiled=False), EvalResult(compiled=True, correct=False, speedup=float("nan"))]
    for cfg in (None, RewardConfig(name="tiered"), RewardConfig(coverage_enable=False, penalty=-1.0)):
        assert [turn_reward(r, cfg) for r in results] == pytest.approx([compute_reward(r, cfg) for r in results])
    assert turn_reward(results[0]) == pytest.approx(1.8)  # 0.5 + 0.5*2.0 + 0.5*0.6


def test_agent_import_is_light():
    import subprocess
    import sys

    code = ("import sys, drkernel.agent, drkernel.agent.episode, drkernel.agent.scaling, drkernel.cli.refine; "
            "print(sorted(m for m in ('torch', 'openai', 'matplotlib', 'tqdm', 'triton') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_overhead_benchmark_under_5ms_per_turn():
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "benchmarks" / "bench_agent.py"
    spec = importlib.util.spec_from_file_location("bench_agent", path)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    bench.measure(2, 2, 4000)  # warm-up
    per_turn = min(bench.measure(16, 3, 4000) for _ in range(3))
    assert per_turn < 5e-3, f"agent loop overhead {1e3 * per_turn:.2f} ms/turn"


def test_turn_seconds_exclude_queueing():
    gen = Scripted([fenced(kernel(1.0))], delay_s=0.05)
    trs = asyncio.run(run_episodes([TASK] * 6, gen, MarkerScorer(capacity=6), EpisodeConfig(max_turns=1),
                                   generation_concurrency=1))  # 6 generations queue behind one slot
    gen_s = [t.turns[0].seconds["generate"] for t in trs]
    assert min(gen_s) >= 0.045 and max(gen_s) < 0.2  # each ~0.05 s; queueing would reach 0.3 s


@pytest.mark.slow
def test_hanging_kernel_ends_at_the_deadline_and_becomes_feedback():
    from pathlib import Path

    from drkernel.env.config import EvalConfig, cpu_fast
    from drkernel.env.grader import LocalGrader

    suite = Path(__file__).resolve().parents[2] / "envs" / "single_ops"
    solution = (suite / "solutions" / "01_relu.py").read_text()
    hang = solution.replace("        x = x.contiguous()\n", "        x = x.contiguous()\n        while True:\n            pass\n")
    assert hang != solution
    gen = Scripted([fenced(hang), fenced(solution)])
    config = cpu_fast(EvalConfig(device="cpu")).with_overrides(call_timeout_s=3.0, measure_performance=False)
    with LocalGrader(config, capacity=1) as grader:
        tr = asyncio.run(run_episode(Task.from_file(suite / "tasks" / "01_relu.py"), gen, grader,
                                     EpisodeConfig(max_turns=2)))
    hung, fixed = tr.turns
    assert not tr.failed and hung.result.error.stage == "correctness" and "timed out" in hung.feedback
    # no timing, but coverage is measured on the correctness calls: R = 0.5 c + 0.5 c cov (PR)
    assert hung.reward == 0.0 and fixed.result.passed and fixed.result.coverage is not None
    assert fixed.reward == pytest.approx(0.5 + 0.5 * fixed.result.coverage)
