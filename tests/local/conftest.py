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
