"""``drkernel.agent.solution_mix`` (testing only) on CPU: the registered agent loop with forced
bundled-solution replies against a fake token server that answers ``prompt_logprobs`` as verl's
vLLM server does, graded by a real CPU grader (Triton interpreter).

What must hold for the verl stage's numbers to mean anything: a forced reply enters the row as
token ids followed by the end-of-turn token, exactly like a sampled one (the next request's prompt
is the stream so far), its mask is 1, its rollout log-probs are the server's log-probs of those
very tokens, and only the chosen samples and turns are forced.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
import torch

pytest.importorskip("verl")

ROOT = Path(__file__).resolve().parents[2]
SUITE = ROOT / "envs" / "single_ops"
RELU = (SUITE / "solutions" / "01_relu.py").read_text()


def _fake_logprob(position: int, token: int) -> float:
    return -0.001 * (1 + (position * 31 + token) % 17)


class PromptLogprobServer:
    """verl's server contract, sampled replies scripted per request; ``prompt_logprobs=0`` answered
    as verl's ``extract_prompt_logprobs`` does: entry j is the log-prob of prompt token j + 1."""

    def __init__(self, tokenizer):
        self.tokenizer = tokenizer
        self.calls: list[dict] = []

    async def generate(self, request_id, *, prompt_ids, sampling_params, **kwargs):
        from verl.workers.rollout.replica import TokenOutput

        prompt_ids = list(prompt_ids)
        extra = {}
        if sampling_params.get("prompt_logprobs") is not None:
            extra["prompt_logprobs"] = [[_fake_logprob(j + 1, t)] for j, t in enumerate(prompt_ids[1:])] + [[0.0]]
            extra["prompt_ids"] = [[t] for t in prompt_ids[1:]] + [[0]]
        text = "I am not sure how to write this kernel yet."
        ids = (self.tokenizer.encode(text, add_special_tokens=False) + [self.tokenizer.eos_token_id])
        ids = ids[: sampling_params["max_tokens"]]
        self.calls.append({"request_id": request_id, "prompt_ids": prompt_ids, "ids": ids,
                           "scored": "prompt_logprobs" in extra, "max_tokens": sampling_params["max_tokens"]})
        await asyncio.sleep(0)
        return TokenOutput(token_ids=ids, log_probs=[-0.5] * len(ids), stop_reason="completed", extra_fields=extra)


def _config(extra=()):
    from drkernel.train import compose

    return compose(["drkernel.agent.max_turns=2", "drkernel.agent.max_tokens_per_turn=3000",
                    "data.max_prompt_length=6000", "data.max_response_length=12000", "drkernel.grader.device=cpu",
                    "drkernel.agent.solution_mix=2", f"drkernel.agent.solution_suite={SUITE}", *extra])


def _run(tokenizer, cfg, sessions):
    from verl.experimental.agent_loop.agent_loop import DictConfigWrap
    from verl.utils.dataset.rl_dataset import RLHFDataset

    from drkernel.data.build import build_rows
    from drkernel.env.config import EvalConfig
    from drkernel.env.grader import LocalGrader
    from drkernel.verl import agent_loop

    row = next(r for r in build_rows(SUITE) if r["extra_info"]["task_id"] == "01_relu")
    server = PromptLogprobServer(tokenizer)
    fast = EvalConfig(device="cpu", trials_per_distribution=1, distributions=("native",), determinism_check=False,
                      warmup=1, timing_trials=2, spot_checks=1)

    async def main():
        grader = LocalGrader(fast, capacity=2)
        try:
            outs = []
            for session in sessions:
                loop = agent_loop.KernelAgentLoop(trainer_config=DictConfigWrap(cfg), server_manager=server,
                                                  tokenizer=tokenizer, processor=None, dataset_cls=RLHFDataset,
                                                  data_config=DictConfigWrap(cfg.data))
                loop.grader = grader
                kwargs = {"raw_prompt": row["prompt"], "reward_model": row["reward_model"],
                          "extra_info": row["extra_info"], "uid": "prompt0", "index": 0, "session_id": session}
                outs.append(await loop.run({"temperature": 1.0, "top_p": 1.0, "logprobs": True}, **kwargs))
            return outs
        finally:
            grader.close()

    return asyncio.run(main()), server


@pytest.fixture(scope="module")
def mixed(tiny_tokenizer):
    outs, server = _run(tiny_tokenizer, _config(), sessions=[0, 1, 2, 3])
    return outs, server, tiny_tokenizer


def test_which_samples_and_turns_are_forced() -> None:
    from drkernel.verl.agent_loop import solution_reply, solution_turns

    agent = {"solution_mix": 2, "solution_suite": str(SUITE), "max_turns": 3}
    reply = solution_reply(RELU)
    forced = {j: solution_turns(agent, {"session_id": j}, task_id="01_relu") for j in range(6)}
    assert forced == {0: {0: reply, 1: reply, 2: reply}, 1: {}, 2: {1: reply, 2: reply}, 3: {},
                      4: {2: reply}, 5: {}}
    # by reference source when the id is unknown; never for a task without a bundled solution
    reference = (SUITE / "tasks" / "01_relu.py").read_text()
    assert solution_turns(agent, {"session_id": 0}, task_id="nope", reference=reference)[0] == reply
    assert solution_turns(agent, {"session_id": 0}, task_id="nope", reference="x = 1") == {}
    assert solution_turns({**agent, "solution_mix": 0}, {"session_id": 0}, task_id="01_relu") == {}
    with pytest.raises(ValueError, match="solution_suite"):
        solution_turns({**agent, "solution_suite": None}, {"session_id": 0}, task_id="01_relu")


def test_forced_replies_are_token_in_token_out_with_the_servers_logprobs(mixed) -> None:
    from drkernel.verl.agent_loop import solution_reply

    outs, server, tok = mixed
    im_end = tok.convert_tokens_to_ids("<|im_end|>")
    expected_forced = {0: [0, 1], 1: [], 2: [1], 3: []}
    by_request = {}
    for c in server.calls:
        by_request.setdefault(c["request_id"], []).append(c)
    assert len(by_request) == 4
    for session, (out, calls) in enumerate(zip(outs, by_request.values())):
        stream = out.prompt_ids + out.response_ids
        ti = torch.tensor(out.tok_turn_index)
        mask = torch.tensor(out.response_mask).bool()
        lp = torch.tensor(out.response_logprobs)
        assert [c["scored"] for c in calls] == [t in expected_forced[session] for t in range(2)]
        assert out.extra_fields["reward_extra_info"]["solution_turns"] == len(expected_forced[session])
        for t, c in enumerate(calls):
            pos = (ti == t).nonzero().flatten().tolist()
            turn_ids = [out.response_ids[p] for p in pos]
            if c["scored"]:
                # the scoring request's prompt is the stream up to the end of the forced reply
                assert stream[: len(c["prompt_ids"])] == c["prompt_ids"]
                reply_ids = tok.encode(solution_reply(RELU), add_special_tokens=False) + [im_end]
                assert turn_ids == reply_ids == c["prompt_ids"][-len(reply_ids):]
                start = len(out.prompt_ids) + pos[0]
                expected = [_fake_logprob(start + k, i) for k, i in enumerate(reply_ids)]
                torch.testing.assert_close(lp[pos], torch.tensor(expected))
                assert tok.decode(turn_ids, skip_special_tokens=True) == solution_reply(RELU)
            else:
                assert turn_ids == c["ids"] and stream[: len(c["prompt_ids"])] == c["prompt_ids"]
                assert bool((lp[pos] == -0.5).all())
        assert bool((mask == (ti >= 0)).all()) and bool((lp[~mask] == 0).all())


def test_forced_turns_are_graded_as_real_kernels(mixed) -> None:
    outs, _, _ = mixed
    assert outs[0].turn_correct == [True, True] and outs[2].turn_correct == [False, True]
    assert outs[1].turn_correct == [False, False] and outs[3].turn_correct == [False, False]
    assert outs[0].turn_rewards[0] > 0.5 and outs[2].turn_rewards[1] > 0.5  # correct + speed/coverage terms
    assert outs[1].turn_rewards == [0.0, 0.0]
    assert outs[2].turn_coverage[1] > 0.4
    # the episodes' rollout timing (drkernel's trainer logs it as drkernel/rollout/*)
    timing = [o.extra_fields["rollout_timing"] for o in outs]
    assert [t["evaluations"] for t in timing] == [2, 0, 1, 0]
    assert timing[0]["grade_s"] > 0 and timing[1]["grade_s"] == 0 and all(t["generate_s"] > 0 for t in timing)
    assert timing[0]["sampled_tokens"] == 0 and timing[1]["sampled_tokens"] > 0
    assert outs[0].metrics.tool_calls == timing[0]["grade_s"]
    # where the grading time went: every evaluation's stage seconds, summed per episode
    assert timing[0]["grade_stage_s"].get("correctness", 0) > 0 and timing[1]["grade_stage_s"] == {}
    assert 0 <= timing[0]["reference_cached"] <= 2 and 0 <= timing[0]["warm_process"] <= 2


def test_a_forced_reply_that_does_not_fit_is_sampled(tiny_tokenizer) -> None:
    n_solution = len(tiny_tokenizer.encode(RELU, add_special_tokens=False))
    cfg = _config([f"data.max_response_length={n_solution // 2}", "drkernel.agent.max_tokens_per_turn=50"])
    (out,), server = _run(tiny_tokenizer, cfg, sessions=[0])
    assert not any(c["scored"] for c in server.calls)
    assert out.extra_fields["reward_extra_info"]["solution_turns"] == 0.0
    assert len(out.response_ids) <= n_solution // 2


def test_solution_mix_is_off_by_default() -> None:
    from drkernel.train import compose
    from drkernel.verl.config import drkernel_node

    node = drkernel_node(compose([]))
    assert node["agent"]["solution_mix"] == 0 and node["agent"]["solution_suite"] is None
