"""Packing episodes into rows, log-prob recomputation, and the loss mask."""

import asyncio

import pytest
import torch

from drkernel.agent.types import Generation
from drkernel.local.hf_generate import HFGenerate
from drkernel.local.pack import pack_trajectories, token_log_probs
from drkernel.local.toy import GuessEnv, ToyTrajectory, ToyTurn


def _turn(prompt, reply, reward=0.0, logprobs=None):
    gen = Generation(text="x", token_ids=reply, logprobs=logprobs or [-1.0] * len(reply), prompt_token_ids=prompt)
    return ToyTurn(index=0, reply="x", reward=reward, feedback="", generation=gen)


def test_loss_mask_covers_exactly_the_sampled_tokens():
    # turn 1: prompt [1 2 3], reply [4 5]; turn 2: prompt extends it with feedback [6 7], reply [8]
    traj = ToyTrajectory("t", [_turn([1, 2, 3], [4, 5], 0.0, [-0.1, -0.2]),
                               _turn([1, 2, 3, 4, 5, 6, 7], [8], 1.0, [-0.3])])
    short = ToyTrajectory("u", [_turn([1, 2], [9], 0.5)])
    p = pack_trajectories([traj, short], num_turns=3, pad_id=0)
    assert p.tok_ids[0].tolist() == [1, 2, 3, 4, 5, 6, 7, 8]
    assert p.policy_mask[0].tolist() == [False, False, False, True, True, False, False, True]
    assert p.tok_turn_index[0].tolist() == [-1, -1, -1, 0, 0, -1, -1, 1]
    assert p.rollout_log_probs[0].tolist() == pytest.approx([0, 0, 0, -0.1, -0.2, 0, 0, -0.3])
    assert p.tok_ids[1].tolist() == [1, 2, 9, 0, 0, 0, 0, 0]
    assert p.attention_mask[1].tolist() == [True] * 3 + [False] * 5
    assert p.policy_mask[1].tolist() == [False, False, True] + [False] * 5
    assert p.turn_exists.tolist() == [[True, True, False], [True, False, False]]
    assert p.turn_rewards[0].tolist() == [0.0, 1.0, 0.0]
    assert not p.failed.any()


def test_rewritten_context_fails_the_trajectory():
    # turn 2's prompt does not start with turn 1's prompt + reply: cannot be one row
    traj = ToyTrajectory("t", [_turn([1, 2, 3], [4, 5]), _turn([1, 2, 3, 9, 6], [8])])
    p = pack_trajectories([traj], num_turns=2, pad_id=0)
    assert p.failed.tolist() == [True]
    assert p.policy_mask[0].tolist() == [False, False, False, True, True]
    assert p.turn_exists.tolist() == [[True, False]]
    assert p.metrics["pack/prefix_break_frac"] == 1.0


def test_missing_token_ids_is_a_clear_error():
    gen = Generation(text="x", token_ids=[1], logprobs=None, prompt_token_ids=[0])
    traj = ToyTrajectory("t", [ToyTurn(0, "x", 0.0, "", gen)])
    with pytest.raises(ValueError, match="token-in/token-out"):
        pack_trajectories([traj], num_turns=1, pad_id=0)


def test_recomputed_log_probs_match_generation(toy_model):
    """Same weights: the trainer's log pi_old over the packed multi-turn rows equals the sampler's
    log mu on every policy token (batched, left-padded sampling with the KV cache vs one forward)."""
    model, tok = toy_model
    env = GuessEnv(num_turns=3)
    gen = HFGenerate(model, tok, seed=3, max_new_tokens=4)
    import random

    items = env.sample(6, random.Random(0))

    async def run():
        return await asyncio.gather(*(env.episode(it, gen, seed=0, sampling={}) for it in items))

    trajs = asyncio.run(run())
    p = pack_trajectories(trajs, 3, tok.pad_token_id)
    assert not p.failed.any(), "HFGenerate splices its own replies: every row must be prefix-consistent"
    assert p.turn_exists.all()
    # the policy tokens are exactly the sampled ones, in order
    for i, tr in enumerate(trajs):
        sampled = [t for turn in tr.turns for t in turn.generation.token_ids]
        assert p.tok_ids[i][p.policy_mask[i]].tolist() == sampled
    with torch.no_grad():
        lp, ent = token_log_probs(model, p.tok_ids, p.attention_mask, with_entropy=True)
    m = p.policy_mask
    assert torch.allclose(lp[m], p.rollout_log_probs[m], atol=1e-4), (lp[m] - p.rollout_log_probs[m]).abs().max()
    assert (ent[m] > 0).all()
    # a changed model no longer matches (the check can fail)
    with torch.no_grad():
        for prm in model.parameters():
            prm.add_(0.05 * torch.randn(prm.shape, generator=torch.Generator().manual_seed(1)))
        lp2, _ = token_log_probs(model, p.tok_ids, p.attention_mask)
        for prm in model.parameters():
            prm.sub_(0.05 * torch.randn(prm.shape, generator=torch.Generator().manual_seed(1)))
    assert not torch.allclose(lp2[m], p.rollout_log_probs[m], atol=1e-4)


def test_hf_generate_stops_and_reports(toy_model):
    model, tok = toy_model
    gen = HFGenerate(model, tok, seed=0, max_new_tokens=2)
    out = gen.generate([{"role": "user", "content": "guess the secret number . hint 3"}])
    assert len(out.token_ids) == len(out.logprobs) <= 2
    assert out.finish_reason in ("stop", "length")
    assert out.prompt_token_ids[-1] == tok.convert_tokens_to_ids("assistant")
    assert all(lp <= 0 for lp in out.logprobs)
    with pytest.raises(ValueError, match="unknown sampling"):
        gen.generate([{"role": "user", "content": "x"}], nucleus=0.9)
    # greedy is deterministic
    a = gen.generate([{"role": "user", "content": "hint 3"}], temperature=0, max_new_tokens=3)
    b = gen.generate([{"role": "user", "content": "hint 3"}], temperature=0, max_new_tokens=3)
    assert a.token_ids == b.token_ids


def test_hf_generate_loads_a_local_directory(toy_model, tmp_path):
    model, tok = toy_model
    model.save_pretrained(str(tmp_path))
    tok.save_pretrained(str(tmp_path))
    gen = HFGenerate(str(tmp_path), seed=0, max_tokens=3, temperature=0)
    a = gen.generate([{"role": "user", "content": "guess the secret number . hint 1"}])
    b = HFGenerate(model, tok, seed=0, max_tokens=3, temperature=0).generate(
        [{"role": "user", "content": "guess the secret number . hint 1"}])
    assert a.token_ids == b.token_ids and a.logprobs == pytest.approx(b.logprobs, abs=1e-5)


def test_batched_top_k_and_top_p_truncate_each_row():
    from drkernel.local.hf_generate import _truncate

    probs = torch.tensor([[0.5, 0.3, 0.2, 0.0], [0.1, 0.2, 0.3, 0.4]], dtype=torch.float64)
    # top-k=2 keeps each row's own two largest
    assert _truncate(probs, 2, 1.0).tolist() == [[0.5, 0.3, 0.0, 0.0], [0.0, 0.0, 0.3, 0.4]]
    # top-p=0.6: row 1 keeps 0.5 (mass above it 0) and 0.3 (0.5 < 0.6); row 2 keeps 0.4, 0.3 (0.4 < 0.6)
    assert _truncate(probs, 0, 0.6).tolist() == [[0.5, 0.3, 0.0, 0.0], [0.0, 0.0, 0.3, 0.4]]
    assert torch.equal(_truncate(probs, 0, 1.0), probs)


def test_batched_sampling_with_top_k_1_is_greedy_per_row(toy_model):
    """Three different prompts sampled as one batch with top_k=1 give each prompt's own greedy reply."""
    model, tok = toy_model
    prompts = [[{"role": "user", "content": f"guess the secret number . hint {h}"}] for h in (1, 2, 3)]
    greedy = [HFGenerate(model, tok, seed=0, temperature=0, max_new_tokens=4).generate(p).token_ids for p in prompts]
    gen = HFGenerate(model, tok, seed=5, temperature=1.0, top_k=1, max_new_tokens=4)

    async def together():
        return await asyncio.gather(*(gen(p) for p in prompts))

    outs = asyncio.run(together())
    assert [o.token_ids for o in outs] == greedy


def test_step_guard_is_entered_around_every_decoding_step(toy_model):
    import contextlib

    model, tok = toy_model
    entered = []

    @contextlib.contextmanager
    def guard():
        entered.append(1)
        yield

    gen = HFGenerate(model, tok, seed=0, temperature=0, max_new_tokens=3, step_guard=guard)
    eos = set(gen.stop_ids)
    out = gen.generate([{"role": "user", "content": "guess the secret number . hint 1"}])
    assert len(entered) == len(out.token_ids) and len(entered) >= 1
    assert out.finish_reason == ("stop" if out.token_ids[-1] in eos else "length")
