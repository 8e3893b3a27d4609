"""The verl stage's model: a random Qwen2 and a BPE tokenizer trained here on a suite's files.

    python tests/gpu/verl/make_tiny.py --out /tmp/verl-run/model [--preset tiny|0.5b|1.5b] [--suite envs/single_ops] [--data DIR]

``--preset``: ``tiny`` (2 layers, hidden 256: 1.8 M parameters, the default) or a real Qwen2.5 shape,
``0.5b`` (24 layers, hidden 896, 14 query / 2 key-value heads, MLP 4864) or ``1.5b`` (28 layers,
hidden 1536, 12 / 2 heads, MLP 8960), so that FSDP sharding, optimizer state, vLLM tensor
parallelism and weight sync cost what they cost for such a model. The vocabulary is the tokenizer's
(2,000 BPE tokens, not Qwen's 151,936: a random model would otherwise sample ids no tokenizer can
decode), so ``0.5b`` holds 0.36 B parameters and ``1.5b`` 1.31 B; saved in bfloat16.

Nothing is downloaded (drkernel.local.tiny). Saved with ``save_pretrained`` (safetensors, config,
generation config, tokenizer with a ChatML template). Then, as verl and vLLM will load it
(``AutoTokenizer``: transformers builds the Qwen2 tokenizer class around the saved vocabulary), it
prints the token counts that size the stage: the longest first prompt of ``--data``'s parquet
files and the longest bundled-solution reply, against ``--prompt-length``/``--response-length``.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

PRESETS = {  # hidden, layers, query heads, key-value heads, MLP
    "tiny": dict(hidden_size=256, num_layers=2, num_heads=4, num_kv_heads=4, intermediate_size=512),
    "0.5b": dict(hidden_size=896, num_layers=24, num_heads=14, num_kv_heads=2, intermediate_size=4864),
    "1.5b": dict(hidden_size=1536, num_layers=28, num_heads=12, num_kv_heads=2, intermediate_size=8960),
}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, help="model directory to write")
    ap.add_argument("--suite", default="envs/single_ops", help="suite whose files train the tokenizer")
    ap.add_argument("--vocab", type=int, default=2000, help="BPE vocabulary size")
    ap.add_argument("--preset", choices=sorted(PRESETS), default="tiny", help="model shape (module docstring)")
    ap.add_argument("--data", default=None, help="directory of `drkernel data build` parquet files to measure")
    ap.add_argument("--prompt-length", type=int, default=1024, help="data.max_prompt_length to check against")
    ap.add_argument("--reply-room", type=int, default=4096 - 512 - 800,
                    help="tokens a forced reply must fit in (response length - a sampled turn - feedback)")
    args = ap.parse_args(argv)

    import torch
    import verl  # noqa: F401 - first: verl's plugin loading then imports drkernel.verl.agent_loop whole
    from transformers import AutoTokenizer

    from drkernel.local.tiny import build_tiny_model, build_tokenizer, suite_texts
    from drkernel.verl.agent_loop import END_OF_TURN_TOKENS, solution_reply

    t0 = time.perf_counter()
    out = Path(args.out)
    tok = build_tokenizer(suite_texts(args.suite), kind="bpe", vocab_size=args.vocab)
    shape = PRESETS[args.preset]
    model = build_tiny_model(tok, max_positions=8192, seed=0, **shape)
    if args.preset != "tiny":
        model = model.to(torch.bfloat16)  # (the tiny model stays float32, as every earlier run had it)
    out.mkdir(parents=True, exist_ok=True)
    tok.save_pretrained(out)
    model.save_pretrained(out)
    model.generation_config.save_pretrained(out)
    n_params = sum(p.numel() for p in model.parameters())
    print(f"make_tiny: {out}: Qwen2 ({args.preset}) {shape['num_layers']} layers, hidden {shape['hidden_size']}, "
          f"{shape['num_heads']}/{shape['num_kv_heads']} heads, {n_params / 1e6:.2f} M parameters, "
          f"vocab {len(tok)}, built in {time.perf_counter() - t0:.1f} s")

    loaded = AutoTokenizer.from_pretrained(str(out))  # what verl and vLLM load
    assert all(t in loaded.get_vocab() for t in END_OF_TURN_TOKENS[:1]), "no <|im_end|> in the saved tokenizer"
    assert len(loaded.encode("\n", add_special_tokens=False)) == 1, "verl's Qwen builder needs a one-token newline"
    ok = True
    solutions = sorted((Path(args.suite) / "solutions").glob("*.py"))
    longest = max((len(loaded.encode(solution_reply(p.read_text()), add_special_tokens=False)) + 1, p.stem)
                  for p in solutions)
    print(f"make_tiny: {type(loaded).__name__}; longest bundled-solution reply {longest[0]} tokens ({longest[1]}), "
          f"room for it {args.reply_room}")
    ok &= longest[0] < args.reply_room
    if args.data:
        import pandas as pd

        for f in sorted(Path(args.data).glob("*.parquet")):
            df = pd.read_parquet(f)
            lengths = [len(loaded.encode(loaded.apply_chat_template([dict(m) for m in p], tokenize=False,
                                                                    add_generation_prompt=True),
                                         add_special_tokens=False)) for p in df["prompt"]]
            print(f"make_tiny: {f.name}: {len(df)} rows, first prompt {min(lengths)}..{max(lengths)} tokens "
                  f"(data.max_prompt_length {args.prompt_length})")
            ok &= max(lengths) <= args.prompt_length
    if not ok:
        print("make_tiny: a prompt or a solution does not fit the stage's lengths", file=sys.stderr)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
