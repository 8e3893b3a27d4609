"""The static decoder (drkernel.local.static_decode): its steps give the HF forward's logits for the
Llama family (Qwen2, Qwen3 with grouped KV heads, Llama), so HFGenerate's replies do not change when
it decodes them, rows joining and leaving included; other models fall back with a reason. CUDA
graphs themselves run in tests/gpu (this file runs the same step eagerly on the CPU)."""

from __future__ import annotations

import asyncio

import pytest
import torch

from drkernel.local.decode import DecodeBatch, Row
from drkernel.local.hf_generate import HFGenerate
from drkernel.local.static_decode import StaticDecoder, unsupported

from .test_decode_on_cpu import CASES, _messages, _together


def _model(kind: str, vocab: int = 97):
    import transformers

    torch.manual_seed(0)
    common = dict(vocab_size=vocab, hidden_size=32, intermediate_size=48, num_hidden_layers=2, num_attention_heads=4,
                  max_position_embeddings=512)
    if kind == "qwen3":
        config = transformers.Qwen3Config(num_key_value_heads=2, head_dim=8, **common)
        return transformers.Qwen3ForCausalLM(config).eval()
    if kind == "llama":
        config = transformers.LlamaConfig(num_key_value_heads=1, **common)
        return transformers.LlamaForCausalLM(config).eval()
    config = transformers.Qwen2Config(num_key_value_heads=4, **common)
    return transformers.Qwen2ForCausalLM(config).eval()


@pytest.mark.parametrize("kind", ["qwen2", "qwen3", "llama"])
@torch.no_grad()
def test_steps_give_the_hf_forwards_logits(kind):
    """Left-padded rows of different lengths: 6 steps of the static decoder against DecodeBatch's HF
    steps from the same prefill (grouped KV heads, Qwen3's q/k norms)."""
    model = _model(kind)
    assert unsupported(model) is None
    rows = [Row(prompt_ids=[(7 * i + j) % 97 for j in range(n)], max_new_tokens=20, temperature=0.0)
            for i, n in enumerate((5, 17, 11))]
    ref = DecodeBatch(model, "cpu", static=False)
    fast = DecodeBatch(model, "cpu", static=True)
    assert fast.fast is not None and fast.fast_reason is None
    ref.add([Row(prompt_ids=r.prompt_ids, max_new_tokens=20, temperature=0.0) for r in rows])
    fast.add(rows)
    for _ in range(6):
        ref.step()
        fast.step()
    for a, b in zip(ref.rows, fast.rows):
        assert b.token_ids == a.token_ids
        assert b.logprobs == pytest.approx(a.logprobs, abs=1e-5)
    assert fast.fast.captures == 0  # eager on the CPU: no graph


@torch.no_grad()
def test_logits_match_a_full_forward_over_the_whole_sequence():
    """One row, no padding: the static step's logits equal the last position's logits of one HF
    forward over prompt + sampled tokens (no cache at all)."""
    model = _model("qwen3")
    batch = DecodeBatch(model, "cpu", static=True)
    row = Row(prompt_ids=list(range(3, 15)), max_new_tokens=8, temperature=0.0)
    batch.add([row])
    seen = []
    dec = batch.fast
    original = dec.step

    def spy(tokens, positions):
        out = original(tokens, positions)
        seen.append(out.clone())
        return out

    dec.step = spy
    for _ in range(4):
        batch.step()
    ids = torch.tensor([row.prompt_ids + row.token_ids[:4]])
    full = model(input_ids=ids).logits[0]
    # the k-th step fed token k (0-based) at position len(prompt) + k
    for k, logits in enumerate(seen):
        torch.testing.assert_close(logits[0], full[len(row.prompt_ids) + k].float(), atol=1e-4, rtol=1e-4)


def test_replies_are_unchanged_with_joins_and_leaves(bpe_model):
    """HFGenerate with the static decoder: greedy replies of rows with different prompts and budgets
    (rows leave at different steps, the buffers are reloaded) equal those of the HF forward, and a
    row joining a running batch too."""
    model, tok = bpe_model
    calls = [(_messages(tok, n, i), {"max_new_tokens": k}) for i, (n, k) in enumerate(CASES)]
    plain = _together(HFGenerate(model, tok, seed=0, temperature=0, static_decode=False), calls)
    gen = HFGenerate(model, tok, seed=0, temperature=0, static_decode=True)
    fast = _together(gen, calls)
    assert gen.fast_reason is None
    for a, b in zip(plain, fast):
        assert b.token_ids == a.token_ids and b.finish_reason == a.finish_reason
        assert b.logprobs == pytest.approx(a.logprobs, abs=1e-4)

    async def staggered(g):
        first = asyncio.ensure_future(g(_messages(tok, 120, "a"), max_new_tokens=30))
        while g.steps < 5:  # the first row is decoding when the second joins
            await asyncio.sleep(0.005)
        second = await g(_messages(tok, 40, "b"), max_new_tokens=6)
        return [await first, second]

    want = [HFGenerate(model, tok, seed=0, temperature=0, static_decode=False).generate(
        _messages(tok, n, t), max_new_tokens=k) for n, t, k in ((120, "a", 30), (40, "b", 6))]
    got = asyncio.run(staggered(HFGenerate(model, tok, seed=0, temperature=0, static_decode=True)))
    for a, b in zip(want, got):
        assert b.token_ids == a.token_ids


def test_other_models_fall_back_with_a_reason():
    import transformers

    gpt2 = transformers.GPT2LMHeadModel(transformers.GPT2Config(vocab_size=50, n_embd=16, n_layer=1, n_head=2))
    assert "gpt2" in unsupported(gpt2)
    batch = DecodeBatch(gpt2, "cpu", static=True)
    assert batch.fast is None and "gpt2" in batch.fast_reason
    with pytest.raises(ValueError, match="gpt2"):
        StaticDecoder(gpt2, "cpu")
    sliding = transformers.Qwen2Config(vocab_size=50, hidden_size=16, intermediate_size=16, num_hidden_layers=1,
                                       num_attention_heads=2, use_sliding_window=True, sliding_window=8)
    assert "sliding" in unsupported(transformers.Qwen2ForCausalLM(sliding))


@torch.no_grad()
def test_a_failing_static_step_falls_back_to_the_hf_forward(monkeypatch):
    """A step the static decoder cannot run (a capture the model does not allow, say): the batch
    gets its cache back, says why, and decodes on with the HF forward; replies are unchanged."""
    model = _model("qwen2")
    rows = [Row(prompt_ids=[(5 * i + j) % 97 for j in range(n)], max_new_tokens=9, temperature=0.0)
            for i, n in enumerate((6, 13))]
    ref = DecodeBatch(model, "cpu", static=False)
    ref.add([Row(prompt_ids=r.prompt_ids, max_new_tokens=9, temperature=0.0) for r in rows])
    fast = DecodeBatch(model, "cpu", static=True)
    fast.add(rows)
    for _ in range(3):  # three good static steps first
        ref.step()
        fast.step()
    monkeypatch.setattr(StaticDecoder, "step", lambda self, t, p: (_ for _ in ()).throw(RuntimeError("capture refused")))
    with pytest.warns(RuntimeWarning, match="capture refused"):
        done_ref, done_fast = ref.step(), fast.step()
    assert fast.fast is None and "capture refused" in fast.fast_reason
    while ref.rows:
        done_ref += ref.step()
    while fast.rows:
        done_fast += fast.step()
    by_prompt = {tuple(r.prompt_ids): r for r in done_ref}
    for r in rows:
        want = by_prompt[tuple(r.prompt_ids)]
        assert r.token_ids == want.token_ids and r.logprobs == pytest.approx(want.logprobs, abs=1e-5)
    assert len(done_fast) == len(rows)
