"""The one-process Dr. Kernel trainer: one GPU, or CPU with a tiny locally built model.

One step, top to bottom (:meth:`Trainer.train_step`: ``drkernel.step.run_training_step`` with the
trainer as its ``TrainerBackend``)::

    items   = env.sample(prompts_per_step)                       each repeated group_size times
    trajs   = episodes of every (item, sample), concurrently     generation (HFGenerate) + grading
    batch   = pack(trajs)                                        one token row per trajectory
    old_lp  = log pi_old of every token (no grad)                the trainer's log-probs
    result  = dr_kernel_step(batch, step_config, state)          masks, MRS, PRS, filter, advantages
    for epoch, mini-batch:                                       (1 x 1 in the recipe)
        for micro-batch: loss = policy_loss(new_lp, old_lp, A, mask,
                                            num_seqs/num_tokens of the mini-batch); loss.backward()
        clip grad norm; AdamW step
    log metrics (TensorBoard + metrics.jsonl), checkpoint

Environments (``Env``): ``toy`` (:class:`drkernel.local.toy.GuessEnv`, a synthetic guessing task)
and a kernel suite (:class:`KernelEnv`: the agent's episode runner, ``drkernel.agent.episode``,
grading through a :class:`~drkernel.env.grader.Grader`).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import math
import random
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Protocol

import torch

from drkernel.config.settings import AgentSettings, GraderSettings, StepSettings
from drkernel.local.pack import PackedBatch, pack_trajectories, token_log_probs
from drkernel.losses import PolicyLossConfig
from drkernel.rewards import RewardConfig


@dataclass
class TrainConfig:
    """Settings of a local run. Its groups are the shared settings (drkernel.config.settings: one
    source of defaults for this trainer and verl's ``drkernel:`` node): ``step`` (estimator, MRS,
    PRS, group filter), ``loss`` (drkernel.losses.PolicyLossConfig), ``reward``
    (drkernel.rewards.RewardConfig), ``grader`` and ``agent``; the rest is this trainer's own.

    Every leaf is a flat ``drkernel train`` flag (drkernel.config.flags): top-level fields
    and the ``step``/``loss``/``agent`` fields by their own name (``--clip-low``, ``--mrs-rs-lower``,
    ``--prs-threshold``), the others prefixed with their group (``--reward-coverage-weight``,
    ``--grader-capacity``), older names kept by :attr:`flag_aliases`. :meth:`from_flat` builds one
    from those flat names (``TrainConfig.from_flat(env="toy", lr=1e-2, clip_high=0.3, mrs=False)``).
    """

    out: str = "runs/local"
    """Output directory: config.json/.yaml, metrics.jsonl, tensorboard/, checkpoints/."""
    env: str = "suite"
    """``suite`` (kernel tasks of ``suite``, graded for real) or ``toy`` (the guessing task)."""
    suite: str | None = None
    """Suite directory (``envs/single_ops``) for ``env=suite``."""
    tasks: str | None = None
    """Task filter of the suite (comma-separated globs/substrings); None = all tasks."""
    max_steps: int = 10
    """Training steps (rollout batches), skipped steps included."""
    device: str = "cpu"
    """``cpu`` or ``cuda[:N]``: where the model runs and, for suites, where kernels are graded."""
    model: str | None = None
    """Local HF model directory; None = a tiny random-weight model built here."""
    precision: str = "auto"
    """``fp32``, ``bf16-mixed`` (fp32 weights and optimizer, bf16 autocast forwards) or ``bf16``
    (bf16 weights: LoRA on big models); ``auto`` = bf16-mixed on cuda, fp32 on cpu."""
    tiny_hidden: int = 64
    """Hidden size of the tiny model."""
    tiny_layers: int = 2
    """Layers of the tiny model."""
    tokenizer_vocab: int = 2000
    """Vocabulary of the locally trained BPE tokenizer (tiny model, suite env)."""
    threads: int = 0
    """torch CPU threads (0 = torch's default); 1 is fastest for a tiny model on a shared machine."""
    generation_threads: int = 0
    """torch threads of the sampling thread on cpu (0 = auto: 1 for the tiny model built here, whose
    decoding steps stall on a second thread whenever another process holds a core; else ``threads``)."""
    seed: int = 0
    """Seed of prompt sampling, generation, grading inputs, PRS and group selection."""
    prompts_per_step: int = 2
    """Prompts (groups) per step."""
    group_size: int = 4
    """Samples (trajectories) per prompt: n."""
    temperature: float = 1.0
    """Sampling temperature (the trainer's log-probs use the same)."""
    max_context_tokens: int | None = None
    """Context budget for the agent's trimming; None = the model's max positions."""
    concurrency: int = 64
    """Episodes in flight at once; their generation calls are decoded together (rows join and leave
    the running batch between decoding steps)."""
    continuous_batching: bool = True
    """Rows join and leave the running batch (a finished reply is graded while the others decode);
    off = static batches, bit-reproducible seeded runs (HFGenerate's ``continuous``)."""
    target_groups: int | None = None
    """Groups per update: fewer valid ones skip the step and buffer them (the recipe uses
    prompts_per_step); None = train on every valid group, never skip."""
    lr: float = 1e-6
    """AdamW learning rate."""
    weight_decay: float = 0.01
    """AdamW weight decay."""
    grad_clip: float = 1.0
    """Max gradient norm."""
    ppo_epochs: int = 1
    """Passes over each batch."""
    mini_batches: int = 1
    """Optimizer steps per pass (1 = the recipe: one optimizer step per rollout batch)."""
    micro_batch_size: int = 8
    """Rows per forward/backward (gradient accumulation; does not change the gradient)."""
    lora: bool = False
    """Train LoRA adapters (peft) instead of all weights."""
    lora_r: int = 8
    """LoRA rank."""
    lora_alpha: int = 16
    """LoRA alpha."""
    save_every: int = 0
    """Checkpoint every k steps (0 = only at the end)."""
    tensorboard: bool = True
    """Write TensorBoard event files (needs tensorboard)."""
    progress: bool = True
    """Show a tqdm progress bar."""
    step: StepSettings = field(default_factory=StepSettings)
    """The Dr. Kernel step: estimator, gamma, void-turn mask, MRS, PRS, group filter."""
    loss: PolicyLossConfig = field(default_factory=PolicyLossConfig)
    """The policy loss (dual-clip PPO, aggregation, scale)."""
    reward: RewardConfig = field(default_factory=RewardConfig)
    """The turn reward of kernel suites (the toy task scores itself)."""
    grader: GraderSettings = field(default_factory=GraderSettings)
    """Grading of kernel suites (on ``device``)."""
    agent: AgentSettings = field(default_factory=lambda: AgentSettings(max_tokens_per_turn=256))
    """The episode (turns, tokens per reply, feedback); replies are capped at 256 tokens here."""

    flag_bare_groups: ClassVar[tuple[str, ...]] = ("step", "loss", "agent")
    """Groups whose leaves are flags by their own name (drkernel.config.flags)."""
    flag_aliases: ClassVar[dict[str, str]] = {
        "step.mrs.enable": "mrs",
        "step.prs.enable": "prs",
        "step.group_filter.enable": "group_filter",
        "agent.max_turns": "num_turns",
        "agent.max_tokens_per_turn": "max_new_tokens",
        "grader.profile": "grade_profile",
        "reward.name": "reward",
    }
    """Flat names of leaves that keep the flags' older names (``--mrs``, ``--num-turns``, ...)."""

    def __post_init__(self) -> None:
        if self.env not in ("suite", "toy"):
            raise ValueError(f"env must be 'suite' or 'toy', got {self.env!r}")
        if self.env == "suite" and not self.suite:
            raise ValueError("env=suite needs a suite directory (--suite envs/single_ops)")
        if self.precision not in ("auto", "fp32", "bf16-mixed", "bf16"):
            raise ValueError(f"precision must be auto, fp32, bf16-mixed or bf16, got {self.precision!r}")
        for name in ("max_steps", "prompts_per_step", "group_size", "agent.max_turns", "agent.max_tokens_per_turn",
                     "ppo_epochs", "mini_batches", "micro_batch_size", "concurrency"):
            value: Any = self
            for part in name.split("."):
                value = getattr(value, part)
            if value < 1:
                raise ValueError(f"{name} must be >= 1, got {value}")

    # ------------------------------------------------------------------ flat names, files

    @classmethod
    def from_flat(cls, values: dict[str, Any] | None = None, **kwargs: Any) -> "TrainConfig":
        """A config from flat names (the ``drkernel train`` flags without ``--``, e.g.
        ``num_turns``, ``clip_high``, ``mrs``, ``prs_threshold``) and/or whole groups."""
        from drkernel.config.flags import from_flat

        return from_flat(cls, values, **kwargs)

    def to_dict(self) -> dict[str, Any]:
        """Plain nested dict (config.json / config.yaml without their ``resolved`` part)."""
        from drkernel.config.settings import to_plain

        return to_plain(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "TrainConfig":
        """Inverse of :meth:`to_dict`; a saved file's ``resolved`` part is ignored."""
        from drkernel.config.settings import from_plain

        return from_plain(cls, {k: v for k, v in data.items() if k != "resolved"})

    @classmethod
    def load(cls, path: str | Path) -> "TrainConfig":
        """The config a run saved (``config.json``/``config.yaml``, or its run directory)."""
        p = Path(path)
        if p.is_dir():
            p = p / "config.json"
        text = p.read_text(encoding="utf-8")
        if p.suffix in (".yaml", ".yml"):
            import yaml

            return cls.from_dict(yaml.safe_load(text))
        return cls.from_dict(json.loads(text))

    # ------------------------------------------------------------------ what the settings resolve to

    def profiling(self) -> bool:
        """Grading attributes the work (coverage): ``grader.profile``, None = on."""
        return True if self.grader.profile is None else bool(self.grader.profile)

    def prs_active(self) -> bool:
        """PRS needs coverage: a kernel suite graded with profiling. Without it every correct turn
        would count as coverage 0 and be rejected, so PRS is off (and says so in config.json)."""
        return self.step.prs.enable and self.env == "suite" and self.profiling()

    def step_config(self) -> Any:
        """The :class:`drkernel.step.DrKernelStepConfig` of this run (``StepSettings.step_config``,
        as verl's ``drkernel.verl.config.step_config``)."""
        return self.step.step_config(samples_per_prompt=self.group_size, target_num_groups=self.target_groups,
                                     prs_active=self.prs_active())


class Env(Protocol):
    """A training environment: prompts and episodes."""

    num_turns: int

    def sample(self, k: int, rng: random.Random) -> list[Any]:
        ...

    async def episode(self, item: Any, generate: Any, *, seed: int, sampling: dict[str, Any]) -> Any:
        ...

    def close(self) -> None:
        ...


class KernelEnv:
    """Kernel tasks of a suite, played by the agent's episode runner and graded by a Grader."""

    def __init__(self, suite_dir: str, *, device: str, num_turns: int, tasks: str | None = None,
                 capacity: int | None = None, profile: bool | None = None, max_context_tokens: int | None = None,
                 reserve_tokens: int = 0, count_tokens: Any = None, generation_concurrency: int = 64,
                 reward: Any = None, no_code_reward: float = 0.0, max_feedback_chars: int | None = None,
                 grade_options: dict[str, Any] | None = None):
        from drkernel.env import LocalGrader, load_suite

        self.suite = load_suite(suite_dir)
        self.tasks = [t.task(self.suite.entry_point) for t in self.suite.select(tasks)]
        if not self.tasks:
            raise ValueError(f"no task of suite {self.suite.id} matches {tasks!r}")
        profile = True if profile is None else profile
        grade_device = "cuda" if device.startswith("cuda") else "cpu"
        options = {"profile": profile, **(grade_options or {})}
        self.grader = LocalGrader(self.suite.eval_config(grade_device, **options), capacity=capacity)
        self.reward = reward
        self.no_code_reward = no_code_reward
        self.max_feedback_chars = max_feedback_chars
        self.num_turns = num_turns
        self.max_context_tokens = max_context_tokens
        self.reserve_tokens = reserve_tokens
        self.count_tokens = count_tokens
        self.generation_concurrency = generation_concurrency
        self._limits = None

    def sample(self, k: int, rng: random.Random) -> list[Any]:
        return [self.tasks[rng.randrange(len(self.tasks))] for _ in range(k)]

    async def episode(self, item: Any, generate: Any, *, seed: int, sampling: dict[str, Any]) -> Any:
        from drkernel.agent.context import approx_tokens
        from drkernel.agent.episode import EpisodeConfig, Limits, run_episode

        if self._limits is None:  # created inside the running event loop
            self._limits = Limits(self.generation_concurrency, self.grader.capacity)
        config = EpisodeConfig(max_turns=self.num_turns, prompt_template=self.suite.prompt_template,
                               sampling=dict(sampling), seed=seed, max_context_tokens=self.max_context_tokens,
                               reserve_tokens=self.reserve_tokens, reward=self.reward,
                               no_code_reward=self.no_code_reward,
                               **({} if self.max_feedback_chars is None else
                                  {"max_feedback_chars": self.max_feedback_chars}))
        return await run_episode(item, generate, self.grader, config, limits=self._limits,
                                 count_tokens=self.count_tokens or approx_tokens)

    def reset_loop(self) -> None:
        self._limits = None

    def close(self) -> None:
        self.grader.close()


class _Timed:
    """Wraps a Generate backend and counts its calls and tokens, and its busy time: the backend's
    own ``busy_seconds`` when it reports one (HFGenerate: time its sampling thread had work), else
    the union of the intervals with a call in flight. A backend with ``stats()`` (HFGenerate) also
    reports its batched forwards, decoding steps and rows per step, and its count of sampled tokens
    (replies it only scored, as ``SolutionMix`` does, are not generated tokens)."""

    def __init__(self, generate: Any):
        self.generate = generate
        self.reset()

    def reset(self) -> None:
        self.tokens = 0
        self.calls = 0
        self._busy0 = float(getattr(self.generate, "busy_seconds", 0.0))
        self._stats0 = self._stats()
        self._wall = 0.0
        self._in_flight = 0
        self._since = 0.0

    def _stats(self) -> dict[str, float]:
        return dict(self.generate.stats()) if hasattr(self.generate, "stats") else {}

    @property
    def seconds(self) -> float:
        if hasattr(self.generate, "busy_seconds"):
            return float(self.generate.busy_seconds) - self._busy0
        return self._wall

    def metrics(self) -> dict[str, float]:
        """``perf/`` generation metrics since the last reset."""
        now = self._stats()
        d = {k: now[k] - self._stats0.get(k, 0.0) for k in now}
        seconds = self.seconds
        tokens = d.get("generated_tokens", float(self.tokens))
        out = {
            "perf/time_generate_s": seconds,
            "perf/generated_tokens": tokens,
            "perf/generation_requests": float(self.calls),
            "perf/generation_calls": d.get("forwards", float(self.calls)),
            "perf/tokens_per_s": tokens / seconds if seconds > 0 else 0.0,
        }
        if d.get("steps"):
            out["perf/generation_steps"] = d["steps"]
            out["perf/generation_batch_mean"] = d["row_steps"] / d["steps"]
        return out

    async def __call__(self, messages: list[dict[str, str]], **sampling: Any) -> Any:
        if self._in_flight == 0:
            self._since = time.perf_counter()
        self._in_flight += 1
        try:
            out = await self.generate(messages, **sampling)
        finally:
            self._in_flight -= 1
            if self._in_flight == 0:
                self._wall += time.perf_counter() - self._since
        self.tokens += len(out.token_ids or ())
        self.calls += 1
        return out


@dataclass
class LocalRollout:
    """One local rollout batch: the episodes, their prompt ids and their packed token rows."""

    trajectories: list[Any]
    group_ids: list[str]
    packed: PackedBatch


class Trainer:
    """Builds the model, tokenizer, environment, optimizer and loggers from a :class:`TrainConfig`.

    It is a :class:`drkernel.step.TrainerBackend` (``rollout``, ``old_log_probs``, ``step_batch``,
    ``update``, ``save_checkpoint``); :meth:`train_step` is :func:`drkernel.step.run_training_step`
    on itself.

    ``model``/``tokenizer``/``env``/``generate`` may be given to replace what the config builds
    (tests and examples do): ``generate`` is a factory ``(model, tokenizer) -> Generate``.
    """

    def __init__(self, config: TrainConfig, *, model: Any = None, tokenizer: Any = None, env: Env | None = None,
                 generate: Any = None):
        self.config = cfg = config
        self.out = Path(cfg.out)
        self.out.mkdir(parents=True, exist_ok=True)
        if cfg.threads:
            torch.set_num_threads(cfg.threads)
        self.device = torch.device(cfg.device)
        self.rng = random.Random(cfg.seed)
        self.torch_gen = torch.Generator().manual_seed(cfg.seed)
        self.tokenizer, base_model = self._setup_model(model, tokenizer)
        self.model = self._setup_lora(base_model).to(self.device)
        self.env = env if env is not None else self._setup_env()
        from drkernel.local.hf_generate import HFGenerate

        backend = generate(self.model, self.tokenizer) if generate is not None else HFGenerate(
            self.model, self.tokenizer, device=cfg.device, seed=cfg.seed, step_guard=self._gpu_guard(),
            max_batch=cfg.concurrency, threads=self._generation_threads(model), continuous=cfg.continuous_batching,
            autocast_dtype=torch.bfloat16 if self._precision() == "bf16-mixed" and self.device.type == "cuda" else None)
        if cfg.agent.solution_mix:
            if cfg.env != "suite":
                raise ValueError("solution_mix needs env=suite (bundled solutions)")
            from drkernel.local.demo import SolutionMix

            backend = SolutionMix(backend, cfg.suite, every=cfg.agent.solution_mix)
        self.generate = _Timed(backend)
        params = [p for p in self.model.parameters() if p.requires_grad]
        self.optimizer = torch.optim.AdamW(params, lr=cfg.lr, weight_decay=cfg.weight_decay)
        self.step_config = self._step_config()
        self.state = None
        self.step = 0
        self._writer = None
        self._metrics_file = None
        self._save_config()

    # ------------------------------------------------------------------ setup

    def _setup_model(self, model: Any, tokenizer: Any) -> tuple[Any, Any]:
        cfg = self.config
        if model is not None:
            if tokenizer is None:
                raise ValueError("a model given to Trainer needs its tokenizer too")
            return tokenizer, model
        if cfg.model:
            from transformers import AutoModelForCausalLM

            from drkernel.local.tiny import load_tokenizer

            tok = tokenizer or load_tokenizer(cfg.model)
            dtype = torch.bfloat16 if self._precision() == "bf16" else torch.float32
            return tok, AutoModelForCausalLM.from_pretrained(cfg.model, local_files_only=True, dtype=dtype)
        from drkernel.local import tiny

        if tokenizer is None:
            if cfg.env == "toy":
                from drkernel.local.toy import vocabulary_texts

                tokenizer = tiny.build_tokenizer(vocabulary_texts(), kind="word")
            else:
                tokenizer = tiny.build_tokenizer(tiny.suite_texts(cfg.suite), kind="bpe",
                                                 vocab_size=cfg.tokenizer_vocab)
        model = tiny.build_tiny_model(tokenizer, hidden_size=cfg.tiny_hidden, num_layers=cfg.tiny_layers, seed=cfg.seed)
        return tokenizer, model.to(torch.bfloat16) if self._precision() == "bf16" else model

    def _generation_threads(self, given_model: Any) -> int | None:
        cfg = self.config
        if self.device.type != "cpu":
            return None
        if cfg.generation_threads:
            return cfg.generation_threads
        tiny = given_model is None and not cfg.model
        return 1 if tiny else (cfg.threads or None)

    def _gpu_guard(self) -> Any:
        """The shared side of the grader's gate of the model's GPU when the grader times candidates
        on that GPU (one machine, one GPU): generation then never overlaps a timed region."""
        if self.device.type != "cuda":
            return None
        name = f"cuda:{self.device.index if self.device.index is not None else torch.cuda.current_device()}"
        if name not in getattr(getattr(self.env, "grader", None), "devices", ()):
            return None
        from drkernel.env.measure.gate import device_gate

        return device_gate(name).shared

    def _precision(self) -> str:
        p = self.config.precision
        if p == "auto":
            return "bf16-mixed" if self.config.device.startswith("cuda") else "fp32"
        return p

    def _amp(self) -> Any:
        """Autocast context of the forwards (bf16-mixed on cuda), else a no-op."""
        if self._precision() == "bf16-mixed" and self.device.type == "cuda":
            return torch.autocast("cuda", dtype=torch.bfloat16)
        return contextlib.nullcontext()

    def _setup_lora(self, model: Any) -> Any:
        cfg = self.config
        if not cfg.lora:
            return model
        from peft import LoraConfig, get_peft_model

        lora = LoraConfig(r=cfg.lora_r, lora_alpha=cfg.lora_alpha, lora_dropout=0.0, bias="none",
                          target_modules=["q_proj", "k_proj", "v_proj", "o_proj"], task_type="CAUSAL_LM")
        return get_peft_model(model, lora)

    def _setup_env(self) -> Env:
        cfg = self.config
        if cfg.env == "toy":
            from drkernel.local.toy import GuessEnv

            return GuessEnv(num_turns=cfg.agent.max_turns)
        from drkernel.agent.context import tokenizer_counter

        limit = getattr(self.model.config, "max_position_embeddings", None)
        budget = cfg.max_context_tokens or limit
        return KernelEnv(cfg.suite, device=cfg.device, num_turns=cfg.agent.max_turns, tasks=cfg.tasks,
                         capacity=cfg.grader.capacity, profile=cfg.grader.profile, max_context_tokens=budget,
                         reserve_tokens=cfg.agent.max_tokens_per_turn, count_tokens=tokenizer_counter(self.tokenizer),
                         reward=cfg.reward, no_code_reward=cfg.agent.no_code_reward,
                         max_feedback_chars=cfg.agent.max_feedback_chars, grade_options=dict(cfg.grader.options),
                         generation_concurrency=cfg.concurrency)

    def _step_config(self) -> Any:
        return self.config.step_config()

    def _profiling(self) -> bool:
        return self.config.profiling()

    def _prs_active(self) -> bool:
        return self.config.prs_active()

    def _save_config(self) -> None:
        resolved = self.config.to_dict()
        resolved["resolved"] = {
            "step": _plain(dataclasses.asdict(self.step_config)),
            "model_class": type(self.model).__name__,
            "trainable_params": sum(p.numel() for p in self.model.parameters() if p.requires_grad),
            "total_params": sum(p.numel() for p in self.model.parameters()),
            "vocab_size": len(self.tokenizer),
            "precision": self._precision(),
            "grade_profile": self._profiling() if self.config.env == "suite" else None,
            "prs_active": self._prs_active(),
        }
        if self.config.step.prs.enable and not self._prs_active():
            resolved["resolved"]["prs_off_reason"] = ("no coverage: the toy task has none" if self.config.env == "toy"
                                                      else "grading without profiling (grade_profile off) gives no "
                                                           "coverage; PRS would reject every correct turn")
        (self.out / "config.json").write_text(json.dumps(resolved, indent=2, default=str) + "\n")
        import yaml

        (self.out / "config.yaml").write_text(yaml.safe_dump(json.loads(json.dumps(resolved, default=str)),
                                                             sort_keys=False))

    # ------------------------------------------------------------------ the loop

    def train(self) -> list[dict[str, float]]:
        """Run ``max_steps`` steps; returns each step's metrics (also in metrics.jsonl)."""
        cfg = self.config
        history = []
        bar = None
        if cfg.progress:
            from tqdm.auto import tqdm

            bar = tqdm(total=cfg.max_steps, desc="train", dynamic_ncols=True)
        try:
            while self.step < cfg.max_steps:
                metrics = self.train_step()
                history.append(metrics)
                self._log(metrics)
                if cfg.save_every and self.step % cfg.save_every == 0:
                    self.save_checkpoint()
                if bar is not None:
                    bar.update(1)
                    bar.set_postfix(reward=f"{metrics.get('reward/mean', math.nan):.3f}",
                                    skipped=int(metrics.get("filter/skipped", 0)),
                                    step_s=f"{metrics['perf/step_time_s']:.1f}")
            self.save_checkpoint(final=True)
        finally:
            if bar is not None:
                bar.close()
            self.close()
        return history

    def train_step(self) -> dict[str, float]:
        """One rollout batch and (unless the filter skips it) one round of updates:
        :func:`drkernel.step.run_training_step` with this trainer as the backend."""
        from drkernel.step import run_training_step

        t_start = time.perf_counter()
        self.step += 1
        outcome = run_training_step(self, self.step_config, self.state, generator=self.torch_gen)
        self.state = outcome.state
        rollout: LocalRollout = outcome.rollout
        trajectories = rollout.trajectories
        metrics: dict[str, float] = dict(rollout.packed.metrics)
        metrics.update(outcome.metrics)  # step, per-turn (drkernel.metrics.turns) and actor metrics
        metrics.update(self._rollout_metrics(trajectories))
        t_end = time.perf_counter()
        grade_s = sum(float(getattr(turn, "seconds", {}).get("grade", 0.0)) for tr in trajectories for turn in tr.turns)
        graded = sum(1 for tr in trajectories for turn in tr.turns if getattr(turn, "result", None) is not None)
        rollout_s = outcome.seconds["rollout"]
        metrics.update({
            "perf/step_time_s": t_end - t_start,
            "perf/time_rollout_s": rollout_s,
            "perf/time_grade_s": grade_s,
            "perf/time_logprob_s": outcome.seconds["logprob"],
            "perf/time_step_fn_s": outcome.seconds["step_fn"],
            "perf/time_update_s": outcome.seconds["update"],
            "perf/evaluations": float(graded),
            "perf/evaluations_per_s": graded / rollout_s if rollout_s > 0 else 0.0,
            "step": float(self.step),
        })
        metrics.update(self.generate.metrics())
        self.generate.reset()
        return metrics

    # ------------------------------------------------------------------ the backend (drkernel.step.TrainerBackend)

    def rollout(self) -> "LocalRollout":
        """Play ``prompts_per_step x group_size`` episodes and pack them, one token row each."""
        trajectories, group_ids = self._rollout()
        packed = pack_trajectories(trajectories, self.config.agent.max_turns, self.tokenizer.pad_token_id or 0)
        return LocalRollout(trajectories=trajectories, group_ids=group_ids, packed=packed)

    def old_log_probs(self, rollout: "LocalRollout") -> torch.Tensor:
        """``log pi_old`` of every packed token with the current weights (no grad)."""
        return self._log_probs_no_grad(rollout.packed)

    def step_batch(self, rollout: "LocalRollout", old_log_probs: torch.Tensor) -> Any:
        """The step's batch: the packed rows and their turn table columns. Without verdicts (the toy
        task grades nothing) ``turn_correct`` is None: no PRS, per-turn metrics of rewards only."""
        from drkernel.step import StepBatch

        packed = rollout.packed
        verdicts = self.config.env == "suite"
        return StepBatch(
            response_mask=packed.policy_mask, old_log_probs=old_log_probs, tok_turn_index=packed.tok_turn_index,
            turn_rewards=packed.turn_rewards, group_ids=rollout.group_ids, rollout_log_probs=packed.rollout_log_probs,
            turn_exists=packed.turn_exists, failed=packed.failed,
            turn_correct=packed.turn_correct if verdicts else None, turn_coverage=packed.turn_coverage,
            turn_speedup=packed.turn_speedup, turn_hacked=packed.turn_hacked if verdicts else None,
            extras={"tok_ids": packed.tok_ids, "attention_mask": packed.attention_mask})

    def update(self, rollout: "LocalRollout", result: Any) -> dict[str, float]:
        """The PPO update on the step's kept rows; nothing when the step was skipped."""
        if result.skipped or not bool(result.loss_mask.any()):
            return {}
        return self._update(result)

    def _rollout(self) -> tuple[list[Any], list[str]]:
        cfg = self.config
        items = self.env.sample(cfg.prompts_per_step, self.rng)
        jobs, group_ids = [], []
        for j, item in enumerate(items):
            for k in range(cfg.group_size):
                jobs.append((item, self.rng.randrange(2**31)))
                group_ids.append(f"s{self.step}_p{j}")
        sampling = {"max_new_tokens": cfg.agent.max_tokens_per_turn, "temperature": cfg.temperature}

        async def run_all() -> list[Any]:
            gate = asyncio.Semaphore(cfg.concurrency)

            async def one(item: Any, seed: int) -> Any:
                async with gate:
                    return await self.env.episode(item, self.generate, seed=seed, sampling=sampling)

            return list(await asyncio.gather(*(one(item, seed) for item, seed in jobs)))

        if hasattr(self.env, "reset_loop"):
            self.env.reset_loop()
        self.model.eval()
        return asyncio.run(run_all()), group_ids

    @torch.no_grad()
    def _log_probs_no_grad(self, packed: PackedBatch) -> torch.Tensor:
        self.model.eval()
        out = torch.zeros(packed.tok_ids.shape, dtype=torch.float32)
        mb = self.config.micro_batch_size
        for s in range(0, packed.num_rows, mb):
            ids, attn = _trim(packed.tok_ids[s:s + mb], packed.attention_mask[s:s + mb])
            with self._amp():
                lp, _ = token_log_probs(self.model, ids.to(self.device), attn.to(self.device),
                                        temperature=self.config.temperature)
            out[s:s + mb, :lp.shape[1]] = lp.float().cpu()
        return out

    def _update(self, result: Any) -> dict[str, float]:
        """PPO epochs x mini-batches, each one optimizer step accumulated over micro-batches."""
        from drkernel.losses import policy_loss

        cfg = self.config
        self.model.train()
        rows = result.loss_mask.shape[0]
        ids_all, attn_all = result.extras["tok_ids"], result.extras["attention_mask"]
        sums: dict[str, float] = {}
        weights: dict[str, float] = {}
        grad_norms = []
        steps = 0
        for _ in range(cfg.ppo_epochs):
            order = torch.randperm(rows, generator=self.torch_gen) if cfg.mini_batches > 1 else torch.arange(rows)
            for mini in order.chunk(min(cfg.mini_batches, rows)):
                mask_mini = result.loss_mask[mini]
                # mini-batch denominators: the accumulated gradient is the mini-batch loss's
                num_tokens = float(mask_mini.sum())
                num_seqs = float((mask_mini.sum(-1) > 0).sum())
                if num_tokens == 0:
                    continue
                self.optimizer.zero_grad(set_to_none=True)
                for micro in mini.split(cfg.micro_batch_size):
                    ids, attn = _trim(ids_all[micro], attn_all[micro])
                    width = ids.shape[1]
                    mask = result.loss_mask[micro][:, :width].to(self.device)
                    if not bool(mask.any()):
                        continue
                    with self._amp():
                        new_lp, entropy = token_log_probs(self.model, ids.to(self.device), attn.to(self.device),
                                                          temperature=cfg.temperature, with_entropy=True)
                    is_w = None if result.is_weights is None else result.is_weights[micro][:, :width].to(self.device)
                    loss, m = policy_loss(
                        new_lp, result.old_log_probs[micro][:, :width].to(self.device),
                        result.tok_advantages[micro][:, :width].to(self.device, new_lp.dtype), mask,
                        **dataclasses.asdict(cfg.loss), is_weights=is_w,
                        entropy=entropy, num_tokens=num_tokens, num_seqs=num_seqs,
                        norm_len=float(cfg.agent.max_tokens_per_turn * cfg.agent.max_turns))
                    loss.backward()
                    w = float(mask.sum())
                    for k, v in m.items():
                        if k == "actor/num_tokens" or not math.isfinite(v):
                            continue
                        sums[k] = sums.get(k, 0.0) + v * w
                        weights[k] = weights.get(k, 0.0) + w
                params = [p for p in self.model.parameters() if p.requires_grad]
                norm = torch.nn.utils.clip_grad_norm_(params, cfg.grad_clip)
                grad_norms.append(float(norm))
                self.optimizer.step()
                steps += 1
        self.optimizer.zero_grad(set_to_none=True)
        out = {k: sums[k] / weights[k] for k in sums}
        out["actor/pg_loss"] = out.get("actor/pg_loss", math.nan)
        out["actor/grad_norm"] = sum(grad_norms) / len(grad_norms) if grad_norms else math.nan
        out["actor/optimizer_steps"] = float(steps)
        out["actor/lr"] = float(self.optimizer.param_groups[0]["lr"])
        out["actor/num_tokens"] = float(result.loss_mask.sum())
        return out

    def _rollout_metrics(self, trajectories: list[Any]) -> dict[str, float]:
        """Rollout health (local only); the per-turn metrics come from ``drkernel.metrics.turns``
        through :func:`drkernel.step.run_training_step`, with the verl trainer's names."""
        out: dict[str, float] = {}
        n = len(trajectories)
        out["rollout/failed_frac"] = sum(1 for t in trajectories if getattr(t, "failed", False)) / n if n else 0.0
        finishes = [turn.generation.finish_reason for tr in trajectories for turn in tr.turns
                    if turn.generation is not None]
        out["rollout/truncated_frac"] = (sum(1 for f in finishes if f == "length") / len(finishes)
                                         if finishes else 0.0)
        statuses = [getattr(turn, "status", None) for tr in trajectories for turn in tr.turns]
        if any(st is not None for st in statuses):
            out["rollout/no_code_frac"] = sum(1 for st in statuses if st == "no_code") / len(statuses)
            out["rollout/context_overflow_frac"] = (sum(1 for st in statuses if st == "context_overflow")
                                                    / len(statuses))
        return out

    # ------------------------------------------------------------------ logging, checkpoints

    def _log(self, metrics: dict[str, float]) -> None:
        if self._metrics_file is None:
            self._metrics_file = open(self.out / "metrics.jsonl", "a", encoding="utf-8")
        clean = {k: (float(v) if math.isfinite(float(v)) else None) for k, v in metrics.items()}
        self._metrics_file.write(json.dumps(clean) + "\n")
        self._metrics_file.flush()
        if self.config.tensorboard:
            if self._writer is None:
                from torch.utils.tensorboard import SummaryWriter

                self._writer = SummaryWriter(str(self.out / "tensorboard"))
                from drkernel.config.flags import flat_values

                table = "\n".join(f"| {k} | {v} |" for k, v in flat_values(self.config).items())
                self._writer.add_text("hyperparameters", "| key | value |\n| --- | --- |\n" + table, 0)
            for k, v in metrics.items():
                if k != "step" and v is not None and math.isfinite(float(v)):
                    self._writer.add_scalar(k, float(v), self.step)
            self._writer.flush()

    def save_checkpoint(self, final: bool = False) -> Path:
        """``checkpoints/step_<k>/``: model (LoRA: the adapter) and tokenizer in HF format,
        optimizer state, trainer state."""
        path = self.out / "checkpoints" / f"step_{self.step}"
        path.mkdir(parents=True, exist_ok=True)
        self.model.save_pretrained(str(path))
        self.tokenizer.save_pretrained(str(path))
        torch.save(self.optimizer.state_dict(), path / "optimizer.pt")
        (path / "trainer_state.json").write_text(json.dumps({"step": self.step, "final": final,
                                                            "lora": self.config.lora}) + "\n")
        return path

    def close(self) -> None:
        if self._metrics_file is not None:
            self._metrics_file.close()
            self._metrics_file = None
        if self._writer is not None:
            self._writer.close()
            self._writer = None
        self.env.close()


def _trim(ids: torch.Tensor, attn: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Drop the right padding shared by every row."""
    width = int(attn.sum(-1).max()) if attn.numel() else 1
    width = max(width, 1)
    return ids[:, :width], attn[:, :width]


def _plain(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


__all__ = ["Env", "KernelEnv", "LocalRollout", "TrainConfig", "Trainer"]
