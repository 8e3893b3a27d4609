"""Shared fixtures of the verl integration tests (run by tests/verl/run.sh with verl 0.9.1 installed)."""

from __future__ import annotations

import importlib.util

import pytest

if importlib.util.find_spec("verl") is None:  # the base install: every module here skips itself
    collect_ignore_glob = ["test_*.py"]

CHAT_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


@pytest.fixture(scope="session")
def tiny_tokenizer():
    """A byte-level BPE tokenizer trained here on a few kernel snippets (nothing is downloaded).

    Byte-level, so every string round-trips; a Qwen-like chat template with <|im_start|>/<|im_end|>.
    """
    from pathlib import Path

    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    root = Path(__file__).resolve().parents[2]
    corpus = [p.read_text() for p in sorted((root / "envs" / "single_ops" / "solutions").glob("0[1-4]*.py"))]
    corpus += [p.read_text() for p in sorted((root / "envs" / "single_ops" / "tasks").glob("0[1-4]*.py"))]
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    trainer = trainers.BpeTrainer(vocab_size=600, special_tokens=specials,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(corpus, trainer)
    return PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|im_end|>", pad_token="<|endoftext|>",
                                   chat_template=CHAT_TEMPLATE)
