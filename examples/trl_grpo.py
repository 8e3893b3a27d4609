"""TRL's GRPOTrainer on a bundled kernel suite, rewarded by drkernel's grader.

    pip install -e '.[env,local,trl]'
    python examples/trl_grpo.py --out runs/trl_grpo                         # CPU: tiny model, interpreter, ~1 min
    python examples/trl_grpo.py --device cuda --model /models/Qwen3-8B --steps 100 \
        --max-completion-length 4096 --num-generations 8 --out runs/trl_grpo_gpu

The policy writes ``ModelNew`` for each task's prompt (:func:`drkernel.integrations.trl.build_dataset`:
the agent's first prompt plus the columns the reward reads); :class:`~drkernel.integrations.trl.KernelReward`
extracts the kernel, grades it through a :class:`~drkernel.env.grader.LocalGrader` (``--device cpu``:
Triton's interpreter with the suite's light CPU protocol; ``--device cuda``: the suite's protocol on
every visible GPU) and returns the recipe's profiling-based reward
``R = 0.5 c + 0.5 c min(s, 3) + 0.5 c cov`` (0 for a hack, a wrong kernel or no kernel).
Its four terms are logged beside it (``--components``: TRL sums them with weights [0.5, 0.5, 0.5, 0],
which is the same R).

Without ``--model`` the policy is a tiny random-weight Qwen2 model with a BPE tokenizer trained here
on the suite's files (:mod:`drkernel.local.tiny`; nothing is downloaded): it exercises the whole
loop (generation, grading, GRPO update) but writes no kernels. ``--model`` takes a local Hugging
Face model directory.

Writes ``<out>/metrics.jsonl`` (TRL's logged metrics per step, ``rewards/kernel_reward/mean`` among
them), ``<out>/summary.json`` (steps, wall time, the last step's rewards) and ``<out>/args.json``.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


@dataclass
class Args:
    out: str = "runs/trl_grpo"
    """Output directory."""
    suite: str = str(REPO / "envs" / "single_ops")
    """Task suite directory."""
    tasks: str = "01_relu,04_silu"
    """Task id patterns of the suite to train on (Suite.select); empty: every task."""
    device: str = "cpu"
    """cpu (Triton interpreter, tiny model on the CPU) or cuda (grading and training on the GPU)."""
    model: str = ""
    """Local Hugging Face model directory; empty: a tiny random-weight model built here."""
    steps: int = 2
    """GRPO steps (TRL's max_steps)."""
    num_generations: int = 2
    """Completions per prompt (the GRPO group)."""
    prompts_per_step: int = 2
    """Prompts per step (per-device batch = prompts_per_step x num_generations)."""
    max_completion_length: int = 16
    """Tokens per completion."""
    lr: float = 1e-5
    """Learning rate."""
    seed: int = 0
    """Seed of the tiny model, TRL's sampling and the hidden grading seeds."""
    components: bool = False
    """Reward with the four terms (correct, speedup, coverage, hack) summed by TRL instead of the total."""
    timing: bool = True
    """Time and profile passing kernels (off: correctness and hack checks only, reward 0.5 per pass)."""
    capacity: int = 0
    """Gradings at once (0: the grader's default: the CPU cores, or 6 per GPU)."""


def build_policy(args: Args):
    """``(model, tokenizer)``: a local model directory, or the tiny random-weight model."""
    if args.model:
        from transformers import AutoModelForCausalLM, AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(args.model, local_files_only=True)
        model = AutoModelForCausalLM.from_pretrained(args.model, local_files_only=True, torch_dtype="auto")
        return model, tokenizer
    from drkernel.local import tiny

    tokenizer = tiny.build_tokenizer(tiny.suite_texts(args.suite), kind="bpe", vocab_size=2000)
    model = tiny.build_tiny_model(tokenizer, hidden_size=64, num_layers=2, seed=args.seed)
    return model, tokenizer


def build_grader(args: Args):
    """A LocalGrader with the suite's protocol on ``args.device`` (light on the CPU)."""
    from drkernel.env import LocalGrader
    from drkernel.env.tasks.suite import load_suite

    config = load_suite(args.suite).eval_config(args.device)
    if not args.timing:
        config = config.with_overrides(measure_performance=False, profile=False)
    return LocalGrader(config, capacity=args.capacity or None)


def build_trainer(args: Args, reward, out: Path):
    """TRL's GRPOTrainer over the suite's prompts with ``reward``."""
    from trl import GRPOConfig, GRPOTrainer

    from drkernel.integrations.trl import build_dataset

    model, tokenizer = build_policy(args)
    dataset = build_dataset(args.suite, tasks=args.tasks or None)
    cpu = args.device == "cpu"
    config = GRPOConfig(
        output_dir=str(out / "trainer"),
        max_steps=args.steps,
        learning_rate=args.lr,
        per_device_train_batch_size=args.prompts_per_step * args.num_generations,
        num_generations=args.num_generations,
        max_completion_length=args.max_completion_length,
        temperature=1.0,
        beta=0.0,                      # no reference model: the tiny run stays small
        logging_steps=1,
        save_strategy="no",
        report_to="none",
        seed=args.seed,
        use_cpu=cpu,
        bf16=not cpu,
        reward_weights=reward.component_weights() if args.components else None,
        dataloader_num_workers=0,
        disable_tqdm=True,
    )
    return GRPOTrainer(model=model, reward_funcs=reward.components() if args.components else reward,
                       args=config, train_dataset=dataset, processing_class=tokenizer)


def run(args: Args) -> dict:
    from drkernel.integrations.trl import KernelReward

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "args.json").write_text(json.dumps(asdict(args), indent=2) + "\n")
    t0 = time.perf_counter()
    grader = build_grader(args)
    reward = KernelReward(grader, seed=args.seed, own_grader=True)
    try:
        trainer = build_trainer(args, reward, out)
        trainer.train()
        history = [h for h in trainer.state.log_history if "loss" in h or any(k.startswith("rewards/") for k in h)]
    finally:
        reward.close()
    with (out / "metrics.jsonl").open("w") as f:
        for h in history:
            f.write(json.dumps(h) + "\n")
    last = history[-1] if history else {}
    summary = {"steps": trainer.state.global_step, "wall_s": round(time.perf_counter() - t0, 1),
               "gradings": reward.batch.gradings,
               "last": {k: v for k, v in last.items() if k.startswith("rewards/") or k in ("reward", "reward_std")}}
    (out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    print(json.dumps(summary))
    return summary


def main(argv: list[str] | None = None) -> int:
    from drkernel.config.flags import argument_parser

    run(Args(**vars(argument_parser(Args, __doc__.split("\n\n")[0]).parse_args(argv))))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
