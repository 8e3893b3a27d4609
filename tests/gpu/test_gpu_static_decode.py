"""The static decoder's CUDA graphs (drkernel.local.static_decode) on a GPU: every log-prob a batch
reports, rows leaving mid-way (buffers reloaded, graphs replayed again or captured anew), equals the
model's own log-prob of that token over the whole sequence without a cache."""

from __future__ import annotations

import pytest
import torch

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")


def _model(kind: str):
    import transformers

    torch.manual_seed(0)
    common = dict(vocab_size=101, hidden_size=64, intermediate_size=96, num_hidden_layers=3, num_attention_heads=4,
                  max_position_embeddings=1024)
    if kind == "qwen3":
        return transformers.Qwen3ForCausalLM(transformers.Qwen3Config(num_key_value_heads=2, head_dim=16, **common))
    return transformers.Qwen2ForCausalLM(transformers.Qwen2Config(num_key_value_heads=4, **common))


@pytest.mark.parametrize("kind,amp", [("qwen2", None), ("qwen3", None), ("qwen2", torch.bfloat16)])
@torch.no_grad()
def test_graph_replayed_steps_report_the_models_own_log_probs(kind, amp):
    from drkernel.local.decode import DecodeBatch, Row

    model = _model(kind).cuda().eval()
    rows = [Row(prompt_ids=[(11 * i + 3 * j) % 101 for j in range(n)], max_new_tokens=k, temperature=0.0)
            for i, (n, k) in enumerate([(9, 40), (33, 7), (20, 25), (5, 60), (14, 3)])]
    batch = DecodeBatch(model, "cuda", static=True, autocast_dtype=amp)
    assert batch.fast is not None
    done = batch.add(rows)
    while batch.rows:
        done += batch.step()
    assert sorted(len(r.token_ids) for r in done) == [3, 7, 25, 40, 60]
    assert batch.fast.captures >= 2  # rows left: the batch shrank to fewer rows, captured again
    tol = 1e-3 if amp is None else 5e-2
    for r in done:
        ids = torch.tensor([r.prompt_ids + r.token_ids], device="cuda")
        with torch.autocast("cuda", dtype=amp, enabled=amp is not None):
            logits = model(input_ids=ids).logits[0].float()
        logp = torch.log_softmax(logits, -1)
        start = len(r.prompt_ids) - 1
        want = [float(logp[start + i, t]) for i, t in enumerate(r.token_ids)]
        assert r.logprobs == pytest.approx(want, abs=tol)
