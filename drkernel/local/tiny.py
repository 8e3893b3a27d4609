"""A tiny causal LM and a tokenizer built on this machine: random weights, nothing downloaded.

For CPU tests, CI and the learning-curve example, and for a first GPU smoke run of the trainer::

    tok = build_tokenizer(texts_of(suite_dir), kind="bpe", vocab_size=2000)
    model = build_tiny_model(tok, hidden_size=64, num_layers=2, seed=0)

* ``kind="bpe"``: byte-level BPE trained on the given texts (any text round-trips through it);
  for kernel suites, train it on the bundled task files (:func:`suite_texts`).
* ``kind="word"``: one token per whitespace-separated word seen in the texts (plus ``<unk>``): a
  vocabulary of a few dozen tokens, so that a randomly initialised policy puts real mass on the
  right answer of a small synthetic task.

Both carry the special tokens ``<|endoftext|>`` (EOS, padding), ``<|im_start|>``, ``<|im_end|>``
and a ChatML chat template, so :class:`~drkernel.local.hf_generate.HFGenerate` stops at
``<|im_end|>`` and splices its replies back in token for token.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

import torch

SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]

CHATML_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def suite_texts(*suite_dirs: str | Path) -> list[str]:
    """Texts of a suite's task files (``tasks/*.py``) and solutions, plus the prompt templates."""
    from drkernel.agent.prompts import get_template, list_templates

    texts: list[str] = []
    for d in suite_dirs:
        for path in sorted(Path(d).glob("**/*.py")):
            texts.append(path.read_text(encoding="utf-8"))
    for name in list_templates():
        t = get_template(name)
        texts += [t.first_turn, t.feedback]
    if not texts:
        raise ValueError(f"no task files found under {[str(d) for d in suite_dirs]}")
    return texts


def build_tokenizer(texts: Iterable[str], *, kind: str = "bpe", vocab_size: int = 2000) -> Any:
    """A ``PreTrainedTokenizerFast`` trained on ``texts``, with ChatML specials and template."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    texts = list(texts)
    if kind == "bpe":
        tok = Tokenizer(models.BPE())
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        tok.decoder = decoders.ByteLevel()
        trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=SPECIAL_TOKENS,
                                      initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
        tok.train_from_iterator(texts, trainer)
    elif kind == "word":
        words = sorted(({w for t in texts for w in t.split()} | {"system", "user", "assistant"})
                       - set(SPECIAL_TOKENS))
        vocab = {w: i for i, w in enumerate(SPECIAL_TOKENS + ["<unk>"] + words)}
        tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
        tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
        tok.decoder = decoders.WordPiece(prefix="##", cleanup=False)  # joins words with spaces
    else:
        raise ValueError(f"kind must be 'bpe' or 'word', got {kind!r}")
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|endoftext|>", pad_token="<|endoftext|>",
                                   additional_special_tokens=["<|im_start|>", "<|im_end|>"])
    fast.chat_template = CHATML_TEMPLATE
    return fast


def load_tokenizer(path: str | Path) -> Any:
    """The tokenizer saved in ``path`` (local files only).

    A tokenizer saved as a plain ``tokenizers`` pipeline (``build_tokenizer``'s, whose config says
    ``TokenizersBackend``/``PreTrainedTokenizerFast``) is loaded as exactly that pipeline:
    ``AutoTokenizer`` in transformers 5 would rebuild the model family's own tokenizer class
    (Qwen2's BPE for the tiny Qwen2 model) around the vocabulary and tokenise differently.
    """
    import json

    from transformers import AutoTokenizer, PreTrainedTokenizerFast

    config_file = Path(path) / "tokenizer_config.json"
    cls = None
    if config_file.exists():
        cls = json.loads(config_file.read_text(encoding="utf-8")).get("tokenizer_class")
    if cls in ("TokenizersBackend", "PreTrainedTokenizerFast") and (Path(path) / "tokenizer.json").exists():
        return PreTrainedTokenizerFast.from_pretrained(str(path), local_files_only=True)
    return AutoTokenizer.from_pretrained(str(path), local_files_only=True)


def build_tiny_model(tokenizer: Any, *, hidden_size: int = 64, num_layers: int = 2, num_heads: int = 4,
                     intermediate_size: int | None = None, max_positions: int = 8192, seed: int = 0,
                     num_kv_heads: int | None = None) -> Any:
    """A randomly initialised Qwen2-architecture causal LM sized to ``tokenizer``.

    ``num_kv_heads``: grouped-query attention's key/value heads (default ``num_heads``: plain
    multi-head). The weights come from a private RNG stream seeded with ``seed`` (the global RNG is
    untouched).
    """
    from transformers import Qwen2Config, Qwen2ForCausalLM

    config = Qwen2Config(
        vocab_size=len(tokenizer), hidden_size=hidden_size, intermediate_size=intermediate_size or 2 * hidden_size,
        num_hidden_layers=num_layers, num_attention_heads=num_heads, num_key_value_heads=num_kv_heads or num_heads,
        max_position_embeddings=max_positions, tie_word_embeddings=True,
        bos_token_id=None, eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id,
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = Qwen2ForCausalLM(config)
    return model


__all__ = ["CHATML_TEMPLATE", "SPECIAL_TOKENS", "build_tiny_model", "build_tokenizer", "load_tokenizer", "suite_texts"]
