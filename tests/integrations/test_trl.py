"""drkernel's kernel reward inside the real TRL 1.16: examples/trl_grpo.py runs 2 GRPO steps on the
CPU (tiny local model, the Triton interpreter), and the trainer's own reward path scores the bundled
solution, a wrong kernel and a hack exactly as ``drkernel eval-kernel`` + ``drkernel.rewards`` do."""

from __future__ import annotations

import io
import json
import sys
from contextlib import redirect_stdout
from pathlib import Path

import pytest

pytest.importorskip("trl", reason="needs the 'trl' extra: pip install -e '.[trl]'")
pytest.importorskip("transformers")

from drkernel.integrations.trl import KernelReward, build_rows, completion_text  # noqa: E402
from drkernel.rewards import compute_reward  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
SUITE = REPO / "envs" / "single_ops"
TASK = SUITE / "tasks" / "01_relu.py"
FIX = REPO / "tests" / "env" / "fixtures" / "candidates"
KERNELS = {
    "solution": (SUITE / "solutions" / "01_relu.py").read_text(),       # passes
    "wrong": (FIX / "wrong" / "relu_identity.py").read_text(),           # copies x: wrong on randn
    "hack": (FIX / "hacks" / "decoy_kernel.py").read_text(),             # never launches its kernel
}


def reply(code: str) -> str:
    return f"The kernel:\n\n```python\n{code}```\n"


def _example():
    sys.path.insert(0, str(REPO / "examples"))
    try:
        import trl_grpo
    finally:
        sys.path.pop(0)
    return trl_grpo


def eval_kernel_reward(candidate: str, seed: int, tmp_path: Path, device: str = "cpu") -> float:
    """``drkernel eval-kernel --device D --no-timing --seed S --json`` -> drkernel.rewards' reward."""
    from drkernel.cli import main

    path = tmp_path / "candidate.py"
    path.write_text(candidate)
    out = io.StringIO()
    with redirect_stdout(out):
        assert main(["eval-kernel", "--task", str(TASK), "--candidate", str(path), "--device", device,
                     "--seed", str(seed), "--no-timing", "--json"]) == 0
    return compute_reward(json.loads(out.getvalue()))


@pytest.fixture(scope="module")
def example():
    return _example()


@pytest.mark.slow
@pytest.mark.parametrize("components", [False, True], ids=["total", "components"])
def test_two_grpo_steps_on_cpu_and_the_trainers_rewards_match_eval_kernel(example, components, tmp_path):
    two_steps_and_known_rewards(example, components, tmp_path, device="cpu")


def two_steps_and_known_rewards(example, components: bool, tmp_path: Path, device: str) -> None:
    """Two GRPO steps of the example on ``device``; then the trainer's reward path on the bundled
    solution, a wrong kernel and a hack equals ``drkernel eval-kernel`` + ``drkernel.rewards`` on them
    (tests/gpu/test_gpu_trl.py runs it on CUDA)."""
    args = example.Args(out=str(tmp_path), steps=2, components=components, timing=False, capacity=2, device=device)
    grader = example.build_grader(args)
    reward = KernelReward(grader, seed=args.seed, own_grader=True)
    try:
        trainer = example.build_trainer(args, reward, tmp_path)
        trainer.train()
        assert trainer.state.global_step == 2
        logged = [h for h in trainer.state.log_history if "reward" in h]
        assert len(logged) == 2
        names = ["kernel_correct", "kernel_speedup", "kernel_coverage", "kernel_hack"] if components \
            else ["kernel_reward"]
        for h in logged:
            assert all(f"rewards/{name}/mean" in h for name in names), sorted(h)
            if not components:
                assert {"kernel/pass_rate", "kernel/no_code_rate"} <= set(h)

        # The trainer's own reward path (TRL's _calculate_rewards: columns repeated per completion,
        # trainer_state/log_* passed, weights applied by TRL) on three known kernels of 01_relu.
        row = build_rows(SUITE, tasks="01_relu")[0]
        prompts = [row["prompt"]] * 3
        completions = [[{"role": "assistant", "content": reply(code)}] for code in KERNELS.values()]
        per_func = trainer._calculate_rewards([dict(row) for _ in range(3)], prompts, completions, [[1]] * 3)
        weights = trainer.reward_weights.to(per_func.device)
        rewards = (per_func * weights).nansum(dim=1).tolist()
    finally:
        reward.close()
    seed = reward.grade_seed("01_relu")
    expected = [eval_kernel_reward(code, seed, tmp_path, device) for code in KERNELS.values()]
    assert expected == [0.5, 0.0, 0.0]  # recipe: 0.5 c (timing off: no speedup or coverage term)
    assert rewards == expected
    if components:  # [c, c s~, c cov, hacked] of solution, wrong, hack
        assert per_func.tolist() == [[1.0, 0.0, 0.0, 0.0], [0.0, 0.0, 0.0, 0.0], [0.0, 0.0, 0.0, 1.0]]


@pytest.mark.slow
def test_with_timing_the_reward_is_the_recipe_of_its_own_result():
    """Timed on the interpreter, the solution's speedup varies run to run; its reward is
    0.5 + 0.5 min(s, 3) + 0.5 cov of the very result graded, and the components add up to it."""
    from drkernel.env import EvalConfig, LocalGrader
    from drkernel.env.config import cpu_fast

    row = build_rows(SUITE, tasks="01_relu")[0]
    columns = {k: [row[k]] * 3 for k in ("task_code", "task_name", "entry_point")}
    completions = [reply(code) for code in KERNELS.values()] + []
    reward = KernelReward(LocalGrader(cpu_fast(EvalConfig(device="cpu")), capacity=2), seed=1, own_grader=True)
    try:
        total = reward(prompts=[row["prompt"]] * 3, completions=completions, **columns)
        results = [x["result"] for x in reward.last]
        terms = [f(prompts=None, completions=completions, **columns) for f in reward.components()]
        assert reward.batch.gradings == 3  # the components reused the total's gradings
    finally:
        reward.close()
    solution = results[0]
    assert solution.passed and solution.speedup is not None and solution.coverage is not None
    assert total[0] == compute_reward(solution) == 0.5 + 0.5 * min(solution.speedup, 3.0) + 0.5 * solution.coverage
    assert total[1:] == [0.0, 0.0] and not results[1].correct and results[2].hacked
    weights = reward.component_weights()
    assert [sum(w * t[i] for w, t in zip(weights, terms)) for i in range(3)] == pytest.approx(total, abs=1e-12)


def test_completion_text_and_missing_columns():
    assert completion_text("plain") == "plain"
    assert completion_text([{"role": "assistant", "content": "a"}, {"role": "tool", "content": "t"},
                            {"role": "assistant", "content": [{"type": "text", "text": "b"}]}]) == "a\nb"

    class NoGrader:
        capacity = 1

        async def agrade(self, *a, **k):  # pragma: no cover - never reached
            raise AssertionError

    reward = KernelReward(NoGrader())
    with pytest.raises(KeyError, match="build_dataset"):
        reward(prompts=["p"], completions=["x"])
    assert reward(prompts=["p"], completions=["no code here"], task_code=["x = 1"]) == [0.0]
    reward.close()


def test_dataset_rows_carry_the_prompt_and_the_rewards_columns():
    rows = build_rows(SUITE, tasks="01_relu,04_silu", repeat=2)
    assert [r["task_name"] for r in rows] == ["01_relu", "01_relu", "04_silu", "04_silu"]
    assert rows[0]["task_code"] == TASK.read_text() and rows[0]["entry_point"] == "Model"
    assert rows[0]["prompt"][0]["role"] == "user" and TASK.read_text().strip() in rows[0]["prompt"][0]["content"]
    plain = build_rows(SUITE, tasks="01_relu", conversational=False, system_prompt="S")
    assert isinstance(plain[0]["prompt"], str) and plain[0]["prompt"].startswith("S\n\n")
    with pytest.raises(ValueError, match="no task"):
        build_rows(SUITE, tasks="nope")


def test_the_reward_grades_through_the_http_service(tmp_path):
    """The same reward through RemoteGrader and a real ``drkernel serve`` (its echo grader answers
    from the submission: HONEST passes), concurrently and exactly once per distinct completion."""
    pytest.importorskip("fastapi", reason="needs the 'serve' extra")
    from drkernel.serve.remote import RemoteGrader
    from tests.service.conftest import Server

    server = Server(tmp_path / "serve", "--grader", "tests.service.echo_grader:make", "--no-warmup",
                    "--workers", "2").start()
    try:
        reward = KernelReward(RemoteGrader(server.url), seed=0, own_grader=True)
        completions = [reply(f"class ModelNew:\n    '{word} {i}'\n") for i, word in
                       enumerate(["HONEST", "wrong", "HONEST", "wrong"])] * 2 + ["no kernel"]
        columns = {"task_code": ["class Model: pass"] * 9, "task_name": ["echo"] * 9}
        try:
            assert reward(prompts=["p"] * 9, completions=completions, **columns) == [0.5, 0.0, 0.5, 0.0] * 2 + [0.0]
            assert reward.batch.gradings == 4  # the repeats waited for (or reused) the first gradings
        finally:
            reward.close()
    finally:
        server.stop()
