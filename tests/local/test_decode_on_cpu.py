"""Batched decoding (drkernel.local.decode) behind HFGenerate: batched calls give what one-at-a-time
calls give, rows join and leave a running batch, and failures reach every waiting call."""

import asyncio
import random
import time
from pathlib import Path

import pytest
import torch

from drkernel.local.decode import DecodeBatch, Row
from drkernel.local.hf_generate import HFGenerate

SOURCE = (Path(__file__).resolve().parents[2] / "envs" / "single_ops").glob("**/*.py")
TEXT = "\n".join(p.read_text() for p in sorted(SOURCE))[:20000]


def _messages(tok, n_tokens, tag):
    """A user message of about ``n_tokens`` tokens (a slice of the suite's files) ending in ``tag``."""
    ids = tok(TEXT, add_special_tokens=False)["input_ids"][:n_tokens]
    return [{"role": "user", "content": tok.decode(ids) + f" {tag}"}]


# rows of different prompt lengths and budgets
CASES = [(40, 12), (300, 30), (7, 1), (150, 25), (90, 5)]


def _together(gen, calls):
    async def run():
        return await asyncio.gather(*(gen(m, **kw) for m, kw in calls))

    return asyncio.run(run())


def test_batched_greedy_equals_one_at_a_time(bpe_model):
    """Greedy: each row of a batched call returns the ids of a one-row call, token for token, and
    log-probs equal within fp tolerance (left padding, per-row positions, stops and budgets)."""
    model, tok = bpe_model
    calls = [(_messages(tok, n, i), {"max_new_tokens": k}) for i, (n, k) in enumerate(CASES)]
    gen = HFGenerate(model, tok, seed=0, temperature=0)
    alone = [HFGenerate(model, tok, seed=0, temperature=0).generate(m, **kw) for m, kw in calls]
    together = _together(gen, calls)
    assert gen.max_rows == len(CASES)  # they really were one batch
    assert gen.steps < sum(len(o.token_ids) for o in together)
    for a, b, (_, kw) in zip(alone, together, calls):
        assert b.token_ids == a.token_ids
        assert b.finish_reason == a.finish_reason
        assert len(b.token_ids) <= kw["max_new_tokens"]
        assert b.logprobs == pytest.approx(a.logprobs, abs=1e-5)
        assert b.prompt_token_ids == a.prompt_token_ids
    assert {len(o.token_ids) for o in together} != {1}  # rows of different lengths left at different steps


def test_sampled_rows_do_not_depend_on_the_batch(bpe_model):
    """Temperature 1: each call draws from its own stream (seed, prompt, repeat count), so batched
    and one-at-a-time calls sample the same tokens, and equal prompts still get different replies."""
    model, tok = bpe_model
    calls = [(_messages(tok, n, i % 3), {"max_new_tokens": 20}) for i, (n, _) in enumerate(CASES)]
    calls.append(calls[0])  # the same prompt twice
    together = _together(HFGenerate(model, tok, seed=7), calls)
    one = HFGenerate(model, tok, seed=7)
    alone = [one.generate(m, **kw) for m, kw in calls]
    assert [o.token_ids for o in together] == [o.token_ids for o in alone]
    for a, b in zip(alone, together):
        assert b.logprobs == pytest.approx(a.logprobs, abs=1e-5)
    assert together[0].token_ids != together[-1].token_ids  # same prompt, second call: another stream
    other_seed = _together(HFGenerate(model, tok, seed=8), calls)
    assert [o.token_ids for o in other_seed] != [o.token_ids for o in together]


def test_rows_join_and_leave_a_running_batch(bpe_model):
    """A long call is decoding; a longer and a shorter prompt join it mid-flight (the cache is
    padded on the left either way), finish first, and every reply equals its one-row greedy reply."""
    model, tok = bpe_model
    long_call = (_messages(tok, 120, "long"), {"max_new_tokens": 60})
    joiners = [(_messages(tok, 400, "a"), {"max_new_tokens": 8}), (_messages(tok, 20, "b"), {"max_new_tokens": 5})]
    ref = HFGenerate(model, tok, seed=0, temperature=0)
    alone = [ref.generate(m, **kw) for m, kw in [long_call] + joiners]
    assert len(alone[0].token_ids) == 60, "the long call must not stop early for this test"
    gen = HFGenerate(model, tok, seed=0, temperature=0, stop_token_ids=())
    order = []

    async def call(m, kw, name):
        out = await gen(m, **kw)
        order.append(name)
        return out

    async def run():
        first = asyncio.ensure_future(call(*long_call, "long"))
        rest = []
        for i, (m, kw) in enumerate(joiners):  # the first joiner is longer than the batch, the second shorter
            while gen.steps < 5 * (i + 1):  # the long call is decoding
                await asyncio.sleep(0.001)
            rest.append(asyncio.ensure_future(call(m, kw, f"j{i}")))
        scored = await gen.ascore(_messages(tok, 30, "s"), "a given reply")  # runs between two steps
        return [await first] + [await r for r in rest], scored

    outs, scored = asyncio.run(run())
    assert order[-1] == "long" and gen.max_rows >= 2 and gen.steps < 60 + 8 + 5
    for a, b in zip(alone, outs):
        assert b.token_ids == a.token_ids
        assert b.logprobs == pytest.approx(a.logprobs, abs=1e-5)
    assert scored.token_ids == ref.score(_messages(tok, 30, "s"), "a given reply").token_ids


def test_max_batch_queues_the_rest(bpe_model):
    model, tok = bpe_model
    calls = [(_messages(tok, n, i), {"max_new_tokens": k}) for i, (n, k) in enumerate(CASES)]
    gen = HFGenerate(model, tok, seed=0, temperature=0, max_batch=2, max_prefill_tokens=64)
    outs = _together(gen, calls)
    assert gen.max_rows <= 2
    ref = HFGenerate(model, tok, seed=0, temperature=0)
    assert [o.token_ids for o in outs] == [ref.generate(m, **kw).token_ids for m, kw in calls]


def test_a_failed_forward_reaches_every_waiting_call(bpe_model):
    model, tok = bpe_model
    entered = []

    def guard():
        entered.append(1)
        if len(entered) == 3:
            raise RuntimeError("device lost")
        return torch.no_grad()

    gen = HFGenerate(model, tok, seed=0, max_new_tokens=10, step_guard=guard)
    calls = [(_messages(tok, 30, i), {}) for i in range(3)]

    async def run():
        return await asyncio.gather(*(gen(m) for m, _ in calls), return_exceptions=True)

    outs = asyncio.run(run())
    assert all(isinstance(o, RuntimeError) and "device lost" in str(o) for o in outs)
    assert len(gen.generate(calls[0][0]).token_ids) >= 1  # the backend still works


def test_a_cancelled_call_leaves_the_batch(bpe_model):
    model, tok = bpe_model
    gen = HFGenerate(model, tok, seed=0, temperature=0, stop_token_ids=())
    gen.stop_ids = ()

    async def run():
        doomed = asyncio.ensure_future(gen(_messages(tok, 50, "x"), max_new_tokens=10_000))
        other = asyncio.ensure_future(gen(_messages(tok, 50, "y"), max_new_tokens=30))
        while gen.steps < 3:
            await asyncio.sleep(0.001)
        doomed.cancel()
        out = await other
        with pytest.raises(asyncio.CancelledError):
            await doomed
        return out

    out = asyncio.run(run())
    assert len(out.token_ids) == 30
    for _ in range(200):  # the sampling thread goes idle: the cancelled row left the batch
        if gen._worker is None:
            break
        time.sleep(0.01)
    assert gen._worker is None
    assert gen.steps < 1000  # the cancelled row did not run its 10k budget


def test_decode_batch_without_room_and_with_top_k_1(bpe_model):
    """A row with no budget finishes at once as ``length``; top_k=1 sampling is greedy per row."""
    model, tok = bpe_model
    model.eval()
    b = DecodeBatch(model, "cpu")
    ids = tok("def forward(self, x):", add_special_tokens=False)["input_ids"]
    empty = Row(prompt_ids=ids, max_new_tokens=0)
    greedy = Row(prompt_ids=ids, max_new_tokens=6, temperature=0)
    top1 = Row(prompt_ids=ids[2:], max_new_tokens=6, temperature=1.0, top_k=1, rng=random.Random(0))
    top1_ref = Row(prompt_ids=ids[2:], max_new_tokens=6, temperature=0)
    with torch.no_grad():
        done = b.add([empty, greedy, top1, top1_ref])
        while b.rows:
            done += b.step()
    assert empty in done and empty.finish_reason == "length" and empty.token_ids == []
    assert top1.token_ids == top1_ref.token_ids and len(greedy.token_ids) == 6
    assert b.rows == [] and b.prefill_rows == 3


def test_inverse_cdf_draws_by_cumulative_mass_and_never_a_zero_mass_token():
    from drkernel.local.decode import _inverse_cdf

    # cumulative mass of row 0: [0, .5, .5, 1] (tokens 0 and 2 have none); row 1 all on token 0
    probs = torch.tensor([[0.0, 0.5, 0.0, 0.5]] * 4 + [[1.0, 0.0, 0.0, 0.0]], dtype=torch.float32)
    u = torch.tensor([0.0, 0.4999, 0.5001, 1.0 - 2**-53, 1.0 - 2**-53], dtype=torch.float64)
    # u * total below .5 -> token 1; above -> token 3; u -> 1 stays on the last token with mass
    assert _inverse_cdf(probs, u).tolist() == [1, 1, 3, 3, 0]
    # unnormalised weights (after top-k/top-p) are read the same way: total 0.4, u = .6 -> 0.24 > 0.2
    assert _inverse_cdf(torch.tensor([[0.2, 0.0, 0.2]]), torch.tensor([0.6], dtype=torch.float64)).tolist() == [2]


def test_static_batches_repeat_a_seeded_multi_turn_run(toy_model):
    """continuous=False: a batch starts when the sampler is idle and hands every reply back at its
    end, so multi-turn episodes form the same batches in every run: two runs are identical."""
    from drkernel.local.toy import GuessEnv

    model, tok = toy_model
    env = GuessEnv(num_turns=3)
    items = env.sample(6, random.Random(0))

    def run():
        gen = HFGenerate(model, tok, seed=3, max_new_tokens=4, continuous=False)

        async def episodes():
            return await asyncio.gather(*(env.episode(it, gen, seed=0, sampling={}) for it in items))

        trajs = asyncio.run(episodes())
        return [[t.generation.token_ids for t in tr.turns] for tr in trajs], gen

    (a, gen_a), (b, gen_b) = run(), run()
    assert a == b
    assert gen_a.steps == gen_b.steps and gen_a.max_rows == 6  # one batch of 6 rows per turn


def test_sampled_frequencies_follow_softmax_at_the_temperature():
    """20k rows, each with its own stream, one draw each: token frequencies match
    softmax(z / T) within 4 standard errors; top-k=2 keeps the two likeliest, renormalised."""
    from drkernel.local.decode import sample_next

    n = 20_000
    logits = torch.tensor([[2.0, 0.5, -1.0, 0.0, 1.0, -3.0]])
    for temperature, top_k in ((1.0, 0), (0.7, 0), (1.0, 2)):
        rows = [Row(prompt_ids=[0], max_new_tokens=1, temperature=temperature, top_k=top_k, rng=random.Random(i))
                for i in range(n)]
        tok, host = sample_next(logits.expand(n, -1).contiguous(), rows, torch.device("cpu"))
        p = torch.softmax(logits[0].double() / temperature, -1)
        lp = p.log()
        if top_k:
            p = torch.where(p >= p.topk(top_k).values[-1], p, torch.zeros_like(p))
            p = p / p.sum()
        freq = torch.bincount(tok, minlength=6).double() / n
        assert ((freq - p).abs() <= 4 * (p * (1 - p) / n).sqrt() + 1e-12).all(), (temperature, top_k, freq, p)
        # the reported log-prob is that of the untruncated distribution at T
        assert [h[1] for h in host[:50]] == pytest.approx([float(lp[int(t)]) for t in tok[:50]], abs=1e-5)


def test_growing_cache_decodes_like_concatenation(bpe_model):
    """Cache layers with spare room (the CPU default) and plain concatenating layers give the same
    tokens and log-probs while rows join (longer and shorter than the batch) and leave."""
    model, tok = bpe_model
    model.eval()
    text = tok(TEXT, add_special_tokens=False)["input_ids"]

    def run(grow):
        b = DecodeBatch(model, "cpu", grow_cache=grow)
        rows = [Row(prompt_ids=text[:n], max_new_tokens=k, temperature=1.0, rng=random.Random(n))
                for n, k in ((60, 40), (20, 3), (300, 12), (5, 30))]
        with torch.no_grad():
            b.add(rows[:2])
            for _ in range(4):
                b.step()
            kinds.add((grow, type(b._cache.layers[0]).__name__ if hasattr(b._cache, "layers") else "legacy"))
            b.add(rows[2:3])  # longer than the batch
            b.step()
            b.add(rows[3:])  # shorter
            while b.rows:
                b.step()
        return rows

    kinds = set()
    grown, plain = run(True), run(False)
    import transformers.cache_utils

    if hasattr(transformers.cache_utils, "DynamicLayer"):  # the growing layers are really used
        assert kinds == {(True, "GrowingLayer"), (False, "DynamicLayer")}, kinds
    assert [r.token_ids for r in grown] == [r.token_ids for r in plain]
    for g, p in zip(grown, plain):
        assert g.logprobs == pytest.approx(p.logprobs, abs=1e-5)
    assert [len(r.token_ids) for r in grown] == [40, 3, 12, 30] or any(r.finish_reason == "stop" for r in grown)
