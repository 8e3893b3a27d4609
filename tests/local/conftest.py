import pytest

pytest.importorskip("transformers")
pytest.importorskip("tokenizers")


@pytest.fixture(scope="module")
def toy_model():
    """A tiny random-weight model and the word tokenizer of the guessing task."""
    import torch

    from drkernel.local.tiny import build_tiny_model, build_tokenizer
    from drkernel.local.toy import vocabulary_texts

    torch.set_num_threads(1)
    tok = build_tokenizer(vocabulary_texts(), kind="word")
    return build_tiny_model(tok, hidden_size=32, num_layers=2, seed=0), tok


@pytest.fixture(scope="module")
def bpe_model():
    """A tiny random-weight model and a small BPE tokenizer trained on single_ops (prompts of a
    few hundred tokens, as the kernel episodes have)."""
    from pathlib import Path

    import torch

    from drkernel.local.tiny import build_tiny_model, build_tokenizer, suite_texts

    torch.set_num_threads(1)
    tok = build_tokenizer(suite_texts(Path(__file__).resolve().parents[2] / "envs" / "single_ops"), kind="bpe",
                          vocab_size=600)
    return build_tiny_model(tok, hidden_size=32, num_layers=2, seed=0), tok
