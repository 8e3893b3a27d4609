"""Benchmark: tokens/s of the local trainer's generation (HFGenerate) with the tiny model.

    python tests/benchmarks/bench_rollout.py [--device cpu|cuda] [--batches 1,8,32] \
        [--prompt-tokens 512,1536] [--new-tokens 256] [--out bench_rollout.json]

The model and tokenizer are built here as ``drkernel train`` builds them (random weights,
a BPE tokenizer trained on the suite's files; nothing is downloaded): ``--tiny-hidden 64
--tiny-layers 2 --tokenizer-vocab 2000`` is the trainer's default (the CPU target), ``256 / 4 /
4000`` the GPU stage's. Prompts are the suite's first-turn prompt cut to ``--prompt-tokens``.

For each (batch size B, prompt length, new tokens) and each mode:

* ``batched``: B calls at once (``asyncio.gather``), decoded together by HFGenerate;
* ``sequential``: the same B calls one after the other (one row per forward, the pre-batching
  cost of a step's episodes).

Every row generates exactly ``--new-tokens`` tokens (stop tokens off, as vLLM's ``ignore_eos``),
so the modes do the same work; tokens/s = generated tokens / wall time of the calls. The table
also gives the decoding steps and the mean rows per step. ``--out`` writes everything as JSON;
``--min-tokens-per-s X`` exits 1 unless the batched mode at ``--check-rows`` (8: the trainer's 2
prompts x 4 samples) reaches X tokens/s. ``bash tests/gpu/run.sh rollout`` runs it on CUDA.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))  # run from a checkout

import torch  # noqa: E402


def build(args: argparse.Namespace, static: bool | None = None):
    from drkernel.local import tiny
    from drkernel.local.hf_generate import HFGenerate

    suite = REPO / args.suite
    tok = tiny.build_tokenizer(tiny.suite_texts(suite), kind="bpe", vocab_size=args.tokenizer_vocab)
    model = tiny.build_tiny_model(tok, hidden_size=args.tiny_hidden, num_layers=args.tiny_layers, seed=0)
    amp = torch.bfloat16 if args.device.startswith("cuda") and args.precision == "bf16-mixed" else None
    gen = HFGenerate(model, tok, device=args.device, seed=0, temperature=1.0, autocast_dtype=amp,
                     max_batch=max(args.batches), threads=args.threads or None, static_decode=static)
    gen.stop_ids = ()  # every row runs its full budget: the modes do the same work
    return gen, tok


def prompt_text(tok, n_tokens: int, suite: Path) -> str:
    """The suite's first-turn prompt (first task), cut or repeated to about ``n_tokens`` tokens."""
    from drkernel.agent.prompts import render_prompt
    from drkernel.env import load_suite

    s = load_suite(suite)
    task = s.tasks[0].task(s.entry_point)
    text = render_prompt(s.prompt_template, task.source, entry_point=task.entry_point)
    ids = tok(text, add_special_tokens=False)["input_ids"]
    while len(ids) < n_tokens:
        ids = ids + ids
    return tok.decode(ids[:n_tokens])


def run_case(gen, messages: list[list[dict]], new_tokens: int, mode: str) -> dict:
    s0 = gen.stats()

    async def batched():
        return await asyncio.gather(*(gen(m, max_new_tokens=new_tokens) for m in messages))

    async def sequential():
        return [await gen(m, max_new_tokens=new_tokens) for m in messages]

    t0 = time.perf_counter()
    outs = asyncio.run(batched() if mode == "batched" else sequential())
    if gen.device.type == "cuda":
        torch.cuda.synchronize()
    dt = time.perf_counter() - t0
    s1 = gen.stats()
    tokens = sum(len(o.token_ids) for o in outs)
    steps = s1["steps"] - s0["steps"]
    return {"mode": mode, "rows": len(messages), "prompt_tokens": len(outs[0].prompt_token_ids),
            "new_tokens": new_tokens, "tokens": tokens, "seconds": round(dt, 4),
            "tokens_per_s": round(tokens / dt, 1), "forwards": int(s1["forwards"] - s0["forwards"]),
            "steps": int(steps), "rows_per_step": round((s1["row_steps"] - s0["row_steps"]) / steps, 2) if steps else 0}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--device", default="cpu")
    p.add_argument("--suite", default="envs/single_ops", help="suite whose files train the tokenizer")
    p.add_argument("--tiny-hidden", type=int, default=64)
    p.add_argument("--tiny-layers", type=int, default=2)
    p.add_argument("--tokenizer-vocab", type=int, default=2000)
    p.add_argument("--precision", default="bf16-mixed", choices=["bf16-mixed", "fp32"],
                   help="on cuda: bf16 autocast as the trainer's default, or fp32")
    p.add_argument("--threads", type=int, default=0, help="torch threads of the sampling thread (0 = torch's)")
    p.add_argument("--batches", default="1,4,8,16", help="batch sizes (concurrent calls)")
    p.add_argument("--prompt-tokens", default="512,1536", help="prompt lengths")
    p.add_argument("--new-tokens", default="256", help="tokens generated per call")
    p.add_argument("--modes", default="batched,sequential")
    p.add_argument("--decode", default="auto", help="decoding steps: comma-separated of static (the static "
                   "decoder, CUDA graphs on a GPU), hf (the HF forward), auto (static on a GPU only)")
    p.add_argument("--sequential-max-rows", type=int, default=8,
                   help="skip the sequential mode above this batch size (it only grows linearly)")
    p.add_argument("--out", default=None, help="write the results as JSON here")
    p.add_argument("--min-tokens-per-s", type=float, default=0.0,
                   help="exit 1 unless the batched mode at --check-rows rows reaches this (every prompt length)")
    p.add_argument("--check-rows", type=int, default=8, help="batch size --min-tokens-per-s applies to")
    args = p.parse_args(argv)
    args.batches = [int(x) for x in args.batches.split(",")]
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        print("bench_rollout: --device cuda but CUDA is not available", file=sys.stderr)
        return 2

    suite = REPO / args.suite
    results = []
    header = (f"{'decode':<7} {'mode':<10} {'rows':>4} {'prompt':>6} {'new':>4} {'tokens':>7} {'s':>7} {'tok/s':>8} "
              f"{'steps':>6} {'rows/step':>9}")
    for decode in args.decode.split(","):
        gen, tok = build(args, {"static": True, "hf": False, "auto": None}[decode])
        run_case(gen, [[{"role": "user", "content": prompt_text(tok, 64, suite)}]] * 2, 8, "batched")  # warm-up
        decode = "static" if gen.fast_reason is None else "hf"
        print(f"device {args.device}  model hidden {args.tiny_hidden} x {args.tiny_layers} layers, vocab {len(tok)}, "
              f"torch threads {torch.get_num_threads()} (sampling thread: {args.threads or 'default'}); decoding "
              f"steps: {decode}" + (f" ({gen.fast_reason})" if gen.fast_reason else ""))
        print(header)
        for plen in [int(x) for x in args.prompt_tokens.split(",")]:
            text = prompt_text(tok, plen, suite)
            for new in [int(x) for x in args.new_tokens.split(",")]:
                for b in args.batches:
                    # distinct prompts (a suffix per row), as the episodes of a step have
                    messages = [[{"role": "user", "content": text + f" #{i}"}] for i in range(b)]
                    for mode in args.modes.split(","):
                        if mode == "sequential" and b > args.sequential_max_rows:
                            continue
                        r = {"decode": decode, **run_case(gen, messages, new, mode)}
                        results.append(r)
                        print(f"{decode:<7} {r['mode']:<10} {r['rows']:>4} {r['prompt_tokens']:>6} {r['new_tokens']:>4} "
                              f"{r['tokens']:>7} {r['seconds']:>7.2f} {r['tokens_per_s']:>8.0f} {r['steps']:>6} "
                              f"{r['rows_per_step']:>9}", flush=True)
    info = {"device": args.device, "device_name": (torch.cuda.get_device_name() if args.device.startswith("cuda")
                                                   else platform.processor() or platform.machine()),
            "torch": torch.__version__, "threads": torch.get_num_threads(), "sampling_threads": args.threads or None,
            "model": {"hidden": args.tiny_hidden, "layers": args.tiny_layers, "vocab": len(tok)},
            "precision": args.precision if args.device.startswith("cuda") else "fp32",
            "load_average": [round(x, 2) for x in os.getloadavg()], "cpu_count": os.cpu_count()}
    try:
        import transformers

        info["transformers"] = transformers.__version__
    except ImportError:
        pass
    first = results[0]["decode"] if results else None  # the check applies to the first decoding listed
    checked = [r for r in results if r["mode"] == "batched" and r["rows"] == args.check_rows and r["decode"] == first]
    failed = [r for r in checked if r["tokens_per_s"] < args.min_tokens_per_s]
    check = None
    if args.min_tokens_per_s:
        check = {"min_tokens_per_s": args.min_tokens_per_s, "rows": args.check_rows, "passed": bool(checked) and not failed,
                 "measured": [r["tokens_per_s"] for r in checked]}
        print(f"check: batched at {args.check_rows} rows >= {args.min_tokens_per_s:.0f} tokens/s: "
              f"{'ok' if check['passed'] else 'FAILED'} ({check['measured']})")
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps({"info": info, "check": check, "results": results}, indent=1) + "\n")
        print(f"wrote {args.out}")
    return 1 if check is not None and not check["passed"] else 0


if __name__ == "__main__":
    raise SystemExit(main())
