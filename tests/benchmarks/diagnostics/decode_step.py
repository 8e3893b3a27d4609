"""Time one decoding step of the local trainer's generation, directly and through HFGenerate, and
list the operators that take the time (diagnostic; any device).

    python tests/benchmarks/diagnostics/decode_step.py --device cuda
"""

import argparse
import asyncio
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests" / "benchmarks"))

import torch  # noqa: E402


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--device", default="cuda")
    p.add_argument("--rows", type=int, default=8)
    args = p.parse_args()
    import bench_rollout as br
    from drkernel.local.decode import DecodeBatch, Row
    from torch.profiler import ProfilerActivity, profile

    dev = args.device
    cuda = dev.startswith("cuda")
    ns = argparse.Namespace(suite="envs/single_ops", tokenizer_vocab=4000, tiny_hidden=256, tiny_layers=4, device=dev,
                            precision="bf16-mixed", batches=[args.rows], threads=0)
    gen, tok = br.build(ns)
    ids = tok(br.prompt_text(tok, 512, REPO / "envs/single_ops"))["input_ids"][:512]
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    for amp in ((torch.bfloat16, None) if cuda else (None,)):
        b = DecodeBatch(gen.model, dev, autocast_dtype=amp)
        with torch.no_grad():
            b.add([Row(list(ids), 64) for _ in range(args.rows)])
            for _ in range(3):
                b.step()
            sync()
            t = time.perf_counter()
            for _ in range(20):
                b.step()
            sync()
            print(f"direct DecodeBatch.step, {args.rows} rows, autocast {amp}: "
                  f"{(time.perf_counter() - t) / 20 * 1e3:.2f} ms/step", flush=True)
            acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
            with profile(activities=acts) as prof:
                for _ in range(5):
                    b.step()
                sync()
        print(prof.key_averages().table(sort_by="cpu_time_total", row_limit=15), flush=True)
    msgs = [{"role": "user", "content": br.prompt_text(tok, 512, REPO / "envs/single_ops")}]

    async def many(n):
        return await asyncio.gather(*(gen(msgs, max_tokens=n) for _ in range(args.rows)))

    asyncio.run(many(8))
    t = time.perf_counter()
    asyncio.run(many(64))
    print(f"HFGenerate, {args.rows} rows x 64 tokens: {(time.perf_counter() - t) / 64 * 1e3:.2f} ms/step", flush=True)


if __name__ == "__main__":
    main()
