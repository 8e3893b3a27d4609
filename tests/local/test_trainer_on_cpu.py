"""The trainer end to end on CPU: the toy task, LoRA, and a bundled kernel suite with the real grader."""

import json
from pathlib import Path

import pytest
import torch

pytest.importorskip("drkernel.step", reason="needs the Dr. Kernel step (drkernel.step, drkernel.losses)")

from drkernel.local.trainer import TrainConfig, Trainer  # noqa: E402

REPO = Path(__file__).resolve().parents[2]


def _toy_config(tmp_path, **kw):
    base = dict(out=str(tmp_path / "run"), env="toy", max_steps=2, prompts_per_step=4, group_size=8, num_turns=3,
                max_new_tokens=3, lr=1e-2, tiny_hidden=32, tiny_layers=1, threads=1, progress=False)
    base.update(kw)
    return TrainConfig.from_flat(**base)


def test_toy_run_writes_logs_config_and_checkpoint(tmp_path):
    trainer = Trainer(_toy_config(tmp_path))
    before = {k: v.clone() for k, v in trainer.model.state_dict().items()}
    history = trainer.train()
    out = tmp_path / "run"
    lines = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    assert len(lines) == len(history) == 2
    keys = set().union(*lines)
    for prefix in ("reward/", "trloo/", "mrs/", "filter/", "actor/", "perf/", "turn1/", "pack/"):
        assert any(k.startswith(prefix) for k in keys), prefix
    for k in ("perf/time_generate_s", "perf/time_update_s", "perf/tokens_per_s", "perf/evaluations_per_s",
              "perf/generation_calls", "perf/generation_requests", "perf/generation_batch_mean",
              "actor/pg_loss", "actor/grad_norm"):
        assert k in keys
    # 4 prompts x 8 samples x 3 turns: 96 requests, decoded as batches of many rows
    assert all(x["perf/generation_requests"] == 96 for x in lines)
    assert all(x["perf/generation_batch_mean"] > 4 for x in lines)
    assert all(x["perf/generation_calls"] < 96 for x in lines)
    assert all("/" in k for k in keys if k != "step")  # every metric namespaced
    cfg = json.loads((out / "config.json").read_text())
    assert cfg["step"]["estimator"] == "trloo" and cfg["resolved"]["step"]["estimator"] == "trloo"
    assert (out / "config.yaml").exists()
    assert list((out / "tensorboard").glob("events.out.tfevents.*"))
    ckpt = out / "checkpoints" / "step_2"
    assert (ckpt / "config.json").exists() and (ckpt / "tokenizer.json").exists()
    assert (ckpt / "optimizer.pt").exists()
    assert json.loads((ckpt / "trainer_state.json").read_text())["final"] is True
    # the update changed the weights (at least one step had a non-zero-variance group)
    assert any(lines[i].get("actor/optimizer_steps") for i in range(2))
    after = trainer.model.state_dict()
    assert any(not torch.equal(before[k], after[k]) for k in before)
    # the checkpoint is a local HF model: --model PATH continues from it (same weights, same tokenizer)
    again = Trainer(_toy_config(tmp_path / "again", model=str(ckpt), max_steps=1))
    loaded = again.model.state_dict()
    assert all(torch.equal(after[k], loaded[k]) for k in after)
    assert again.tokenizer("guess 3")["input_ids"] == trainer.tokenizer("guess 3")["input_ids"]
    again.close()


def test_lora_toggle_trains_only_adapters(tmp_path):
    pytest.importorskip("peft")
    trainer = Trainer(_toy_config(tmp_path, lora=True, lora_r=4, max_steps=1, lr=5e-2, seed=1))
    names = [n for n, p in trainer.model.named_parameters() if p.requires_grad]
    assert names and all("lora_" in n for n in names)
    frozen = {n: p.detach().clone() for n, p in trainer.model.named_parameters() if not p.requires_grad}
    lora_before = {n: p.detach().clone() for n, p in trainer.model.named_parameters() if p.requires_grad}
    history = trainer.train()
    params = dict(trainer.model.named_parameters())
    assert all(torch.equal(frozen[n], params[n]) for n in frozen)
    if history[0].get("actor/optimizer_steps"):
        assert any(not torch.equal(lora_before[n], params[n]) for n in lora_before)
    cfg = json.loads((tmp_path / "run" / "config.json").read_text())
    assert cfg["resolved"]["trainable_params"] < cfg["resolved"]["total_params"] / 2
    assert (tmp_path / "run" / "checkpoints" / "step_1" / "adapter_config.json").exists()
    # without LoRA every weight trains
    full = Trainer(_toy_config(tmp_path / "full", max_steps=1))
    assert all(p.requires_grad for p in full.model.parameters())
    full.close()


def test_estimator_by_name_and_unknown_name(tmp_path):
    with pytest.raises(ValueError, match="trloo"):
        _toy_config(tmp_path, estimator="nope")
    trainer = Trainer(_toy_config(tmp_path, estimator="grpo", max_steps=1))
    m = trainer.train()[0]
    assert any(k.startswith("grpo/") for k in m)


@pytest.mark.slow
def test_suite_run_with_the_real_cpu_grader(tmp_path):
    """Two steps on single_ops with a tiny model: one sample per group answers with the bundled
    solution (SolutionMix: scored by the model, so it trains like a sampled reply), the other is
    sampled; the real CPU grader grades the solution, rewards differ, and the update runs."""
    pytest.importorskip("drkernel.agent.episode", reason="needs the agent's episode runner")
    pytest.importorskip("triton")

    suite = REPO / "envs" / "single_ops"
    config = TrainConfig.from_flat(out=str(tmp_path / "run"), env="suite", suite=str(suite), tasks="01_relu",
                                   max_steps=2, prompts_per_step=1, group_size=2, num_turns=2, max_new_tokens=8, lr=1e-3,
                                   tiny_hidden=32, tiny_layers=1, tokenizer_vocab=600, threads=1, progress=False,
                                   grader_capacity=2, solution_mix=2)
    trainer = Trainer(config)
    history = trainer.train()
    assert len(history) == 2
    first = history[0]
    assert first["perf/evaluations"] >= 1  # the solution was graded for real
    assert first["turn1/correct"] > 0
    assert first["reward/max"] > 0 and first["reward/min"] == 0
    assert first.get("actor/optimizer_steps", 0) >= 1, {k: v for k, v in first.items() if k.startswith(("prs", "filter", "mrs/rej"))}
    assert first["perf/time_grade_s"] > 0
    # CPU grading attributes the work too (the torch-work estimate): coverage is there and PRS is on;
    # the bundled solution's coverage is 1, so PRS keeps its correct turns
    assert first["prs/coverage_mean"] == 1.0 and first["prs/correct_masked_frac"] == 0.0
    resolved = json.loads((tmp_path / "run" / "config.json").read_text())["resolved"]
    assert resolved["prs_active"] is True and resolved["grade_profile"] is True
    assert (tmp_path / "run" / "checkpoints" / "step_2").exists()


def test_micro_batches_accumulate_the_mini_batch_gradient(tmp_path):
    """The same rows split into micro-batches of 1 or all at once give the same gradient: the
    mini-batch denominators go to every micro-batch call (no len(micro)/len(mini) rescaling)."""
    from types import SimpleNamespace

    from drkernel.local.pack import pack_trajectories
    from drkernel.local.toy import GuessEnv

    grads = {}
    for mb in (1, 16):
        trainer = Trainer(_toy_config(tmp_path / f"mb{mb}", micro_batch_size=mb, agg_mode="seq-mean-token-sum"))
        import asyncio
        import random

        env = GuessEnv(num_turns=2)
        items = env.sample(5, random.Random(0))
        async def play(gen=trainer.generate):
            return await asyncio.gather(*(env.episode(it, gen, seed=0, sampling={"max_new_tokens": 3}) for it in items))

        if mb == 1:  # both trainers have the same weights (same seed): reuse the episodes
            trajs = asyncio.run(play())
        packed = pack_trajectories(trajs, 2, 0)
        old = trainer._log_probs_no_grad(packed)
        adv = torch.linspace(-1, 1, packed.num_rows)[:, None].expand_as(old).contiguous() * packed.policy_mask
        result = SimpleNamespace(loss_mask=packed.policy_mask, extras={"tok_ids": packed.tok_ids,
                                 "attention_mask": packed.attention_mask}, is_weights=None,
                                 old_log_probs=old, tok_advantages=adv)
        captured = {}

        def capture(*a, _t=trainer, _c=captured, **k):
            for n, p in _t.model.named_parameters():
                if p.grad is not None:
                    _c[n] = p.grad.clone()

        trainer.optimizer.step = capture
        trainer.config.grad_clip = 1e9
        metrics = trainer._update(result)
        assert metrics["actor/optimizer_steps"] == 1
        grads[mb] = captured
        trainer.close()
    assert grads[1].keys() == grads[16].keys() and grads[1]
    for n in grads[1]:
        assert torch.allclose(grads[1][n], grads[16][n], atol=1e-6, rtol=1e-4), n
