"""The registered kernel agent loop on CPU: real verl 0.9.1 agent-loop classes, a fake LLM server
(token-in/token-out, scripted replies, known log-probs), a tokenizer built here, and a real CPU
grader (Triton interpreter). Then the Dr. Kernel step on its output, as drkernel's trainer runs it."""

from __future__ import annotations

import asyncio
import dataclasses
from pathlib import Path

import pytest
import torch

pytest.importorskip("verl")

ROOT = Path(__file__).resolve().parents[2]
RELU = (ROOT / "envs" / "single_ops" / "solutions" / "01_relu.py").read_text()
WRONG = "import torch\nimport torch.nn as nn\n\n\nclass ModelNew(nn.Module):\n    def forward(self, x):\n        return x\n"
SCRIPTS = [
    # trajectory A: no code, then a wrong kernel
    ["Let me think about the memory layout first.", f"```python\n{WRONG}```"],
    # trajectory B: a wrong kernel, then a correct Triton ReLU
    [f"```python\n{WRONG}```", f"Fixed.\n```python\n{RELU}```"],
]


class FakeServer:
    """verl's ``server_manager.generate`` contract: prompt ids in, sampled ids and log-probs out."""

    def __init__(self, tokenizer, scripts):
        self.tokenizer = tokenizer
        self.scripts = [list(s) for s in scripts]
        self.by_request: dict[str, list[str]] = {}
        self.calls: list[dict] = []

    async def generate(self, request_id, *, prompt_ids, sampling_params, **kwargs):
        from verl.workers.rollout.replica import TokenOutput

        if request_id not in self.by_request:
            self.by_request[request_id] = self.scripts.pop(0)
        text = self.by_request[request_id].pop(0)
        ids = self.tokenizer.encode(text, add_special_tokens=False) + [self.tokenizer.eos_token_id]
        ids = ids[: sampling_params["max_tokens"]]
        logprobs = [-0.01 * (1 + (len(self.calls) + k) % 7) for k in range(len(ids))]
        self.calls.append({"request_id": request_id, "prompt_ids": list(prompt_ids), "ids": ids, "logprobs": logprobs,
                           "max_tokens": sampling_params["max_tokens"]})
        await asyncio.sleep(0)
        return TokenOutput(token_ids=ids, log_probs=logprobs, stop_reason="stop")


@pytest.fixture(scope="module")
def episodes(tiny_tokenizer):
    from verl.experimental.agent_loop.agent_loop import DictConfigWrap, _agent_loop_registry
    from verl.utils.dataset.rl_dataset import RLHFDataset

    from drkernel.data.build import build_rows
    from drkernel.env.config import EvalConfig
    from drkernel.env.grader import LocalGrader
    from drkernel.train import compose
    from drkernel.verl import agent_loop

    agent_loop.register()
    assert _agent_loop_registry["drkernel_kernel_agent"]["_target_"] == "drkernel.verl.agent_loop.KernelAgentLoop"
    cfg = compose(["drkernel.agent.max_turns=2", "drkernel.agent.max_tokens_per_turn=3000",
                   "data.max_prompt_length=6000", "data.max_response_length=12000", "drkernel.grader.device=cpu"])
    row = next(r for r in build_rows(ROOT / "envs" / "single_ops") if r["extra_info"]["task_id"] == "01_relu")
    server = FakeServer(tiny_tokenizer, SCRIPTS)
    fast = EvalConfig(device="cpu", trials_per_distribution=1, distributions=("native",), determinism_check=False,
                      warmup=1, timing_trials=2, spot_checks=1)

    async def main():
        grader = LocalGrader(fast, capacity=2)
        loops = []
        for _ in range(2):
            loop = agent_loop.KernelAgentLoop(trainer_config=DictConfigWrap(cfg), server_manager=server,
                                              tokenizer=tiny_tokenizer, processor=None, dataset_cls=RLHFDataset,
                                              data_config=DictConfigWrap(cfg.data))
            loop.grader = grader
            loops.append(loop)
        kwargs = {"raw_prompt": row["prompt"], "reward_model": row["reward_model"], "extra_info": row["extra_info"],
                  "uid": "prompt0", "index": 0}
        outs = []
        for loop in loops:  # A first, so it takes script A
            outs.append(asyncio.ensure_future(loop.run({"temperature": 1.0, "top_p": 1.0, "logprobs": True}, **kwargs)))
            await asyncio.sleep(0)
        try:
            return await asyncio.gather(*outs)
        finally:
            grader.close()

    outs = asyncio.run(main())
    return outs, server, tiny_tokenizer, cfg


def _calls_of(server, i):
    rid = list(server.by_request)[i]
    return [c for c in server.calls if c["request_id"] == rid]


def test_token_in_token_out_masks_and_logprobs(episodes) -> None:
    outs, server, tok, _ = episodes
    for i, out in enumerate(outs):
        calls = _calls_of(server, i)
        assert len(calls) == 2
        stream = out.prompt_ids + out.response_ids
        # each call's prompt is exactly the stream so far: nothing was re-tokenised
        for c in calls:
            n = len(c["prompt_ids"])
            assert stream[:n] == c["prompt_ids"]
            assert stream[n:n + len(c["ids"])] == c["ids"]
        assert calls[0]["prompt_ids"] == out.prompt_ids
        # mask 1 exactly on the sampled tokens; their log-probs are the server's; turn index per token
        mask = torch.tensor(out.response_mask)
        ti = torch.tensor(out.tok_turn_index)
        lp = torch.tensor(out.response_logprobs)
        for t, c in enumerate(calls):
            pos = (ti == t).nonzero().flatten()
            assert [out.response_ids[p] for p in pos.tolist()] == c["ids"]
            assert torch.allclose(lp[pos], torch.tensor(c["logprobs"]))
        assert bool((mask.bool() == (ti >= 0)).all())
        assert bool((lp[~mask.bool()] == 0).all())
        # the feedback between the turns is in the stream, as the model's context, with mask 0
        first_end = int((ti == 0).nonzero().max())
        second_start = int((ti == 1).nonzero().min())
        feedback = tok.decode(out.response_ids[first_end + 1:second_start])
        assert "user" in feedback and second_start - first_end > 5
        assert len(out.response_ids) <= 12000 and calls[1]["max_tokens"] <= 3000


def test_per_turn_rewards_verdicts_and_rm_scores(episodes) -> None:
    from drkernel.rewards import RewardConfig, compute_reward

    outs, _, _, _ = episodes
    a, b = outs
    assert a.turn_rewards[0] == 0.0 and a.turn_correct == [False, False]  # no code, then wrong
    assert b.turn_rewards[0] == 0.0 and b.turn_correct == [False, True]  # wrong, then correct
    result = b.extra_fields["turn_results"][1]
    assert result["correct"] and result["compiled"] and not result["hacked"]
    assert b.turn_rewards[1] == pytest.approx(compute_reward(result, RewardConfig()))
    assert b.turn_rewards[1] >= 0.5 + 0.5 * 0.4  # correct, and coverage of a pure Triton ReLU is high
    assert b.turn_coverage[1] == pytest.approx(result["coverage"])
    assert a.extra_fields["turn_results"][0] is None  # nothing graded without code
    # the wrong "kernel" returns its input through torch alone: no Triton kernel ran, so the grader
    # marks that turn hacked (no_triton_kernel); a turn without code is not graded, hence not hacked
    for out in (a, b):
        results = out.extra_fields["turn_results"]
        assert out.turn_hacked == [bool(r and r["hacked"]) for r in results]
    assert a.turn_hacked == [False, True] and b.turn_hacked == [True, False]
    assert "no_triton_kernel" in b.extra_fields["turn_results"][0]["hack_reasons"]
    assert a.turn_exists == [True, True] and not a.failed
    assert b.extra_fields["reward_extra_info"]["last_turn_reward"] == pytest.approx(b.turn_rewards[1])
    # verl's TransferQueue record: turn rewards on each turn's last model token
    d = b.as_dict()
    ti = d["tok_turn_index"]
    for t in range(2):
        last = int((ti == t).nonzero().max())
        assert float(d["rm_scores"][last]) == pytest.approx(b.turn_rewards[t])
    assert float(d["rm_scores"].sum()) == pytest.approx(sum(b.turn_rewards))
    assert d["rollout_log_probs"].shape == d["responses"].shape == d["tok_turn_index"].shape
    assert d["turn_rewards"].shape == (2,) and d["failed"].tolist() == [False]


def _padded(outs):
    """The batch drkernel's trainer reads from TransferQueue, padded as verl pads it."""
    rows = [o.as_dict() for o in outs]
    width = max(r["responses"].shape[0] for r in rows)

    def pad(key, value=0):
        return torch.stack([torch.nn.functional.pad(r[key], (0, width - r[key].shape[0]), value=value) for r in rows])

    data = {k: pad(k) for k in ("response_mask", "rollout_log_probs", "tok_turn_index", "rm_scores")}
    data["old_log_probs"] = data["rollout_log_probs"].clone()  # trainer == rollout: no mismatch
    for k in ("turn_rewards", "turn_exists", "turn_correct", "turn_hacked", "turn_coverage", "turn_speedup", "failed"):
        data[k] = torch.stack([r[k] for r in rows])
    return data


def test_step_on_agent_loop_output_matches_trloo_and_verl_estimator(episodes) -> None:
    from drkernel.advantages.trloo import trloo_advantages
    from drkernel.verl.config import step_config
    from drkernel.verl.estimator import trloo_token_advantages
    from drkernel.verl.step_adapter import run_step

    outs, _, _, cfg = episodes
    data = _padded(outs)
    sc = step_config(cfg, estimator="trloo", gamma=1.0, samples_per_prompt=2)
    out, metrics, _ = run_step(data, ["prompt0", "prompt0"], sc, generator=torch.Generator().manual_seed(0))
    r = torch.tensor([o.turn_rewards for o in outs], dtype=torch.float64)
    expected_turn = trloo_advantages(r, ["prompt0", "prompt0"])  # A: -r_B2, B: +r_B2 on both turns
    ti = data["tok_turn_index"]
    mask = data["response_mask"].bool()
    for i in range(2):
        for t in range(2):
            sel = (ti[i] == t) & mask[i]
            assert torch.allclose(out["advantages"][i, sel].double(), expected_turn[i, t].expand(int(sel.sum())),
                                  atol=1e-5)
    assert torch.equal(out["response_mask"].bool(), mask)  # nothing rejected: no mismatch, high coverage
    assert metrics["drkernel/filter/num_valid_groups"] == 1.0
    assert metrics["drkernel/kernel/turn2/correct"] == 0.5 and metrics["drkernel/kernel/turn1/correct"] == 0.0
    # the verl-registered estimator sees the same rows through rm_scores + response_mask alone
    adv, _ = trloo_token_advantages(data["rm_scores"], data["response_mask"], ["prompt0", "prompt0"])
    torch.testing.assert_close(adv, out["advantages"], atol=1e-5, rtol=1e-5)


def test_step_mrs_veto_and_prs_on_agent_loop_output(episodes) -> None:
    from drkernel.verl.config import step_config
    from drkernel.verl.step_adapter import run_step

    outs, _, _, cfg = episodes
    data = _padded(outs)
    ti = data["tok_turn_index"]
    # one token of B's turn 1 has rho = pi_old / mu = e^-12 < 1e-4: the per-turn veto drops that
    # turn only; B's trajectory-level geometric ratio then also leaves [0.999, 1.001] (MRS)
    old = data["old_log_probs"].clone()
    pos = int((ti[1] == 0).nonzero()[0])
    old[1, pos] -= 12.0
    data["old_log_probs"] = old
    sc = step_config(cfg, estimator="trloo", gamma=1.0, samples_per_prompt=2)
    out, metrics, _ = run_step(data, ["prompt0", "prompt0"], sc, generator=torch.Generator().manual_seed(0))
    m = out["response_mask"].bool()
    assert not bool(m[1].any())  # B rejected (geometric MRS), A untouched
    assert torch.equal(m[0], data["response_mask"][0].bool())
    assert metrics["drkernel/mrs/log_ratio_min"] == pytest.approx(-12.0)
    # the veto alone (no trajectory RS): only B's turn 1 goes, its turn 2 stays
    veto_only = dataclasses.replace(sc, mismatch=dataclasses.replace(sc.mismatch, rs=None))
    outv, _, _ = run_step(data, ["prompt0", "prompt0"], veto_only, generator=torch.Generator().manual_seed(0))
    mv = outv["response_mask"].bool()
    assert not bool(mv[1][ti[1] == 0].any()) and bool(mv[1][ti[1] == 1].all()) and torch.equal(mv[0], m[0])
    # rejected rows still count in their peers' baselines: A's advantages are unchanged
    data2 = _padded(outs)
    ref, _, _ = run_step(data2, ["prompt0", "prompt0"], sc, generator=torch.Generator().manual_seed(0))
    assert torch.allclose(out["advantages"][0], ref["advantages"][0])
    # PRS: B's correct turn 2 with coverage 0.2 < theta = 0.3 is never trained on
    data3 = _padded(outs)
    data3["turn_coverage"][1, 1] = 0.2
    out3, _, _ = run_step(data3, ["prompt0", "prompt0"], sc, generator=torch.Generator().manual_seed(0))
    m3 = out3["response_mask"].bool()
    assert not bool(m3[1][ti[1] == 1].any()) and bool(m3[1][ti[1] == 0].all())


class _NoGrading:
    capacity = 1

    async def agrade(self, *args, **kwargs):
        raise AssertionError("nothing should be graded: the replies hold no code")


def test_response_budget_ends_the_dialogue_instead_of_truncating(tiny_tokenizer) -> None:
    """When rollout.response_length has no room for another reply, the episode ends there: its turns
    are kept and trained (not a failure), and verl never has to cut the response."""
    from verl.experimental.agent_loop.agent_loop import DictConfigWrap
    from verl.utils.dataset.rl_dataset import RLHFDataset

    from drkernel.data.build import build_rows
    from drkernel.train import compose
    from drkernel.verl import agent_loop

    long_reply = "I need to think about tiling and the memory layout of the tensors. " * 12
    row = next(r for r in build_rows(ROOT / "envs" / "single_ops") if r["extra_info"]["task_id"] == "01_relu")
    reply_tokens = len(tiny_tokenizer.encode(long_reply, add_special_tokens=False)) + 1
    budget = reply_tokens + 40  # room for one reply, not for the feedback plus a second one
    cfg = compose(["drkernel.agent.max_turns=3", f"drkernel.agent.max_tokens_per_turn={reply_tokens + 5}",
                   "data.max_prompt_length=6000", f"data.max_response_length={budget}"])
    server = FakeServer(tiny_tokenizer, [[long_reply] * 3])

    async def main():
        loop = agent_loop.KernelAgentLoop(trainer_config=DictConfigWrap(cfg), server_manager=server,
                                          tokenizer=tiny_tokenizer, processor=None, dataset_cls=RLHFDataset,
                                          data_config=DictConfigWrap(cfg.data))
        loop.grader = _NoGrading()
        return await loop.run({"temperature": 1.0}, raw_prompt=row["prompt"], reward_model=row["reward_model"],
                              extra_info=row["extra_info"], uid="p", index=0)

    out = asyncio.run(main())
    assert len(server.calls) == 1 and server.calls[0]["max_tokens"] == reply_tokens + 5
    assert out.turn_exists == [True, False, False] and not out.failed
    assert out.turn_rewards[1:] == [0.0, 0.0] and out.turn_correct == [False, False, False]
    assert len(out.response_ids) <= budget and sum(out.response_mask) == reply_tokens
