"""The GPU verl stage (tests/gpu/verl/ppo_steps.sh) checked on CPU as far as it goes without a GPU:
its exact overrides compose through the recipes' entry point (``python -m drkernel.train --dry-run``)
into the intended run, verl's validation and dataclasses accept them, and the agent loop runs
under them with the stage's tiny tokenizer as verl loads it (AutoTokenizer, Qwen2 class, verl's
Qwen Continuous Token builder)."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("verl")

ROOT = Path(__file__).resolve().parents[2]
STAGE = ROOT / "tests" / "gpu" / "verl"
SUITE = ROOT / "envs" / "single_ops"


def override_lines(name: str) -> list[str]:
    """A stage overrides file's lines as the shell scripts read them (comments and blank lines dropped)."""
    return [line for line in (STAGE / name).read_text().splitlines()
            if line.strip() and not line.lstrip().startswith("#")]


def stage_overrides(work: Path, steps: int = 3, gpus: int = 1, tp: int = 1) -> list[str]:
    """overrides.txt as ppo_steps.sh expands it (comments and blank lines dropped, $VARS replaced),
    plus the runtime_env lines it forwards."""
    subst = {"$MODEL": str(work / "model"), "$DATA": str(work / "data"), "$WORK": str(work), "$SUITE": str(SUITE),
             "$STEPS": str(steps), "$GPUS": str(gpus), "$TP": str(tp), "$BATCH": str(4 * gpus),
             "$NCPUS": str(16 * gpus), "$LABEL": "verl"}
    out = []
    for line in override_lines("overrides.txt"):
        for k, v in subst.items():
            line = line.replace(k, v)
        out.append(line)
    out += [f"+ray_kwargs.ray_init.runtime_env.env_vars.{k}='{v}'" for k, v in
            (("PYTHONPATH", f"{ROOT}:/tmp/verl-site"), ("VLLM_USE_FLASHINFER_SAMPLER", "0"),
             ("TENSORBOARD_DIR", str(work / "tensorboard")))]
    return out


@pytest.fixture(scope="module")
def stage_cfg(tmp_path_factory):
    """The composed stage config, and its work dir holding the model make_tiny.py builds."""
    from drkernel.train import compose

    work = tmp_path_factory.mktemp("verl-run")
    proc = subprocess.run([sys.executable, str(STAGE / "make_tiny.py"), "--out", str(work / "model"),
                           "--suite", str(SUITE)], cwd=ROOT, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"})
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    return compose(stage_overrides(work)), work


def test_the_stage_composes_into_the_intended_run(stage_cfg) -> None:
    from omegaconf import OmegaConf

    from drkernel.train import check_config
    from drkernel.verl.config import drkernel_node, step_config

    cfg, work = stage_cfg
    r = OmegaConf.to_container(cfg, resolve=True)
    arr = r["actor_rollout_ref"]
    rollout = arr["rollout"]
    assert r["trainer"]["n_gpus_per_node"] == 1 and r["trainer"]["nnodes"] == 1 and rollout["n_gpus_per_node"] == 1
    assert rollout["name"] == "vllm" and rollout["mode"] == "async" and rollout["enforce_eager"] is True
    assert rollout["gpu_memory_utilization"] == 0.3 and rollout["tensor_model_parallel_size"] == 1
    assert rollout["agent"]["default_agent_loop"] == "drkernel_kernel_agent" and rollout["agent"]["num_workers"] == 1
    assert rollout["prompt_length"] == 1024 and rollout["response_length"] == 4096 and rollout["calculate_log_probs"]
    assert r["algorithm"]["adv_estimator"] == "trloo" and r["trainer"]["v1"]["trainer_mode"] == "drkernel_sync"
    assert r["trainer"]["use_v1"] is True
    assert r["trainer"]["total_training_steps"] == 3 and r["trainer"]["save_freq"] == 3
    assert r["trainer"]["val_before_train"] is False and r["trainer"]["test_freq"] == -1
    assert {"tensorboard", "console", "file"} <= set(r["trainer"]["logger"])
    assert r["trainer"]["default_local_dir"] == str(work / "ckpt")
    assert arr["model"]["path"] == str(work / "model") and arr["model"]["use_remove_padding"] is False
    assert arr["model"]["override_config"]["attn_implementation"] == "sdpa"
    assert arr["actor"]["ulysses_sequence_parallel_size"] == 1 and arr["actor"]["use_kl_loss"] is False
    assert r["transfer_queue"]["backend"]["SimpleStorage"]["num_data_storage_units"] == 1
    env = r["ray_kwargs"]["ray_init"]["runtime_env"]["env_vars"]
    assert all(isinstance(v, str) for v in env.values()) and env["VLLM_USE_FLASHINFER_SAMPLER"] == "0"
    # verl's own rollout correction and DAPO filter stay off: MRS/PRS/filter run in drkernel's step
    assert r["algorithm"]["rollout_correction"]["rollout_is"] is None and not r["algorithm"]["filter_groups"]["enable"]
    node = drkernel_node(cfg)
    assert node["agent"]["max_turns"] == 2 and node["agent"]["solution_mix"] == 2
    assert node["agent"]["solution_suite"] == str(SUITE)
    assert node["grader"] == {**node["grader"], "kind": "local", "device": "cuda", "capacity": 4}
    sc = step_config(cfg, estimator="trloo", samples_per_prompt=4)
    assert sc.estimator == "trloo" and sc.mismatch.rs == "geometric" and sc.mismatch.token_veto == pytest.approx(1e-4)
    assert sc.prs is not None and sc.group_filter and sc.resolved_min_group_size() == 3
    check_config(cfg, gpu_checks=True)  # verl's validate_config: batch sizes against 1 GPU


def test_verl_dataclasses_accept_the_stage_nodes(stage_cfg) -> None:
    """verl's dataclasses take the nodes; its model config loads make_tiny.py's model as the workers will."""
    from verl.utils.config import omega_conf_to_dataclass

    cfg, _ = stage_cfg
    for node in (cfg.algorithm, cfg.actor_rollout_ref.actor, cfg.actor_rollout_ref.rollout):
        omega_conf_to_dataclass(node)
    model = omega_conf_to_dataclass(cfg.actor_rollout_ref.model)
    assert model.hf_config.model_type == "qwen2" and model.hf_config._attn_implementation == "sdpa"
    assert model.tokenizer.convert_tokens_to_ids("<|im_end|>") is not None and model.tokenizer.chat_template


def test_dry_run_with_exactly_the_stage_overrides(tmp_path) -> None:
    env = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    proc = subprocess.run([sys.executable, "-m", "drkernel.train", "--dry-run", *stage_overrides(tmp_path)],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "default_agent_loop: drkernel_kernel_agent" in proc.stdout and "solution_mix: 2" in proc.stdout


def test_agent_loop_under_the_stage_config_with_the_stage_tokenizer(stage_cfg) -> None:
    """Two episodes of the stage (session 0: solution from turn 1; session 1: sampled) with the
    tokenizer make_tiny.py saves, loaded as verl loads it, and verl's Qwen builder (hf_model_type
    qwen2): token-in/token-out holds, lengths stay in the stage's budget."""
    import torch
    from transformers import AutoTokenizer
    from verl.experimental.agent_loop.agent_loop import DictConfigWrap
    from verl.utils.dataset.rl_dataset import RLHFDataset
    from verl.workers.rollout.replica import TokenOutput

    from drkernel.data.build import build_rows
    from drkernel.env.config import EvalConfig
    from drkernel.env.grader import LocalGrader
    from drkernel.verl import agent_loop

    cfg, work = stage_cfg
    cfg = cfg.copy()
    cfg.drkernel.grader.device = "cpu"
    tok = AutoTokenizer.from_pretrained(str(work / "model"))  # make_tiny.py's, as verl loads it
    gen = torch.Generator().manual_seed(0)
    calls = []

    class Server:  # random replies up to max_tokens; prompt_logprobs as verl's vLLM server returns them
        async def generate(self, request_id, *, prompt_ids, sampling_params, **kw):
            n = sampling_params["max_tokens"]
            ids = torch.randint(3, len(tok), (n,), generator=gen).tolist()
            extra = {}
            if sampling_params.get("prompt_logprobs") is not None:
                extra["prompt_logprobs"] = [[-1.0]] * len(prompt_ids)
            calls.append({"rid": request_id, "prompt": list(prompt_ids), "n": n, "scored": bool(extra)})
            return TokenOutput(token_ids=ids, log_probs=[-7.0] * n, stop_reason="completed", extra_fields=extra)

    row = next(r for r in build_rows(SUITE) if r["extra_info"]["task_id"] == "01_relu")
    fast = EvalConfig(device="cpu", trials_per_distribution=1, distributions=("native",), determinism_check=False,
                      warmup=1, timing_trials=2, spot_checks=1)

    async def main():
        grader = LocalGrader(fast, capacity=2)
        try:
            outs = []
            for session in (0, 1):
                loop = agent_loop.KernelAgentLoop(trainer_config=DictConfigWrap(cfg), server_manager=Server(),
                                                  tokenizer=tok, processor=None, dataset_cls=RLHFDataset,
                                                  data_config=DictConfigWrap(cfg.data), hf_model_type="qwen2")
                assert type(loop.continuous_token_builder).__name__ == "QwenContinuousTokenBuilder"
                loop.grader = grader
                outs.append(await loop.run({"temperature": 1.0, "top_p": 1.0, "logprobs": True},
                                           raw_prompt=row["prompt"], reward_model=row["reward_model"],
                                           extra_info=row["extra_info"], uid="p0", index=0, session_id=session))
            return outs
        finally:
            grader.close()

    forced, sampled = asyncio.run(main())
    assert forced.turn_correct == [True, True] and forced.extra_fields["reward_extra_info"]["solution_turns"] == 2.0
    assert sampled.turn_correct == [False, False] and sampled.extra_fields["reward_extra_info"]["solution_turns"] == 0
    rids = list(dict.fromkeys(c["rid"] for c in calls))  # one request id per episode, in order
    assert len(rids) == 2
    for out, rid in zip((forced, sampled), rids):
        assert len(out.prompt_ids) <= 1024 and len(out.response_ids) <= 4096
        assert len(out.response_ids) == len(out.response_mask) == len(out.response_logprobs) == len(out.tok_turn_index)
        stream = out.prompt_ids + out.response_ids
        mine = [c for c in calls if c["rid"] == rid]
        assert len(mine) == 2 and [c["scored"] for c in mine] == ([True, True] if out is forced else [False, False])
        for c in mine:
            assert stream[: len(c["prompt"])] == c["prompt"]  # every request is a prefix of the row
    assert all(c["n"] <= 512 for c in calls if not c["scored"])  # drkernel.agent.max_tokens_per_turn


def test_the_stage_keeps_its_per_gpu_batch_at_four_gpus_with_tensor_parallel_vllm(stage_cfg) -> None:
    """ppo_steps.sh's GPUS=4 TP=2 (the scaling runs): 4x the prompts, one agent-loop worker and 16
    Ray CPUs per GPU, vLLM in two replicas of two GPUs; verl's checks accept the batch sizes."""
    from omegaconf import OmegaConf

    from drkernel.train import check_config, compose

    _, work = stage_cfg
    cfg = compose(stage_overrides(work, gpus=4, tp=2))
    r = OmegaConf.to_container(cfg, resolve=True)
    arr = r["actor_rollout_ref"]
    assert r["trainer"]["n_gpus_per_node"] == 4 and arr["rollout"]["n_gpus_per_node"] == 4
    assert r["data"]["train_batch_size"] == 16 and arr["actor"]["ppo_mini_batch_size"] == 16
    assert arr["rollout"]["tensor_model_parallel_size"] == 2 and arr["rollout"]["agent"]["num_workers"] == 4
    assert r["ray_kwargs"]["ray_init"]["num_cpus"] == 64
    check_config(cfg, gpu_checks=True)


SFT_OVERRIDES = override_lines("sft_overrides.txt")


def test_the_sft_chain_composes_through_the_recipe(stage_cfg, tmp_path) -> None:
    """sft_chain.sh's SFT stage: recipes/sft_coldstart.sh --dry-run with exactly sft_overrides.txt on
    the stage's model composes into one GPU, padded SDPA batches and a Hugging Face model saved
    beside the shards (what the RL stage starts from)."""
    import yaml

    _, work = stage_cfg
    env = {**os.environ, "PYTHON": sys.executable, "MODEL_PATH": str(work / "model"), "GPUS_PER_NODE": "1",
           "SFT_FILES": str(tmp_path / "sft.parquet"), "OUTPUT_DIR": str(tmp_path / "ckpt"),
           "PYTHONPATH": f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    proc = subprocess.run(["bash", str(ROOT / "recipes" / "sft_coldstart.sh"), "--dry-run", *SFT_OVERRIDES],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    cfg = yaml.safe_load(proc.stdout)
    assert cfg["model"]["path"] == str(work / "model") and cfg["model"]["use_remove_padding"] is False
    assert cfg["model"]["override_config"]["attn_implementation"] == "sdpa"
    assert cfg["trainer"]["n_gpus_per_node"] == 1 and cfg["trainer"]["total_training_steps"] == 4
    assert cfg["engine"]["ulysses_sequence_parallel_size"] == 1 and cfg["engine"]["use_torch_compile"] is False
    assert "hf_model" in cfg["checkpoint"]["save_contents"]
    assert cfg["data"]["train_files"] == str(tmp_path / "sft.parquet")


def test_the_sft_chain_data_reads_as_verl_reads_it(stage_cfg, tmp_path) -> None:
    """solution_episodes.py's export (two tasks graded on the CPU) through verl's
    MultiTurnSFTDataset with the stage's tokenizer: each dialogue is user, assistant (the reference,
    refused), feedback, assistant (the solution, passed); the per-turn chat template concatenates
    to the whole dialogue's (no mismatch to ignore); only assistant tokens carry the loss."""
    import pandas as pd
    from omegaconf import OmegaConf
    from transformers import AutoTokenizer
    from verl.utils.dataset.multiturn_sft_dataset import MultiTurnSFTDataset

    sys.path.insert(0, str(STAGE))
    try:
        import solution_episodes
    finally:
        sys.path.remove(str(STAGE))
    _, work = stage_cfg
    env = {**os.environ, "TRITON_INTERPRET": "1",
           "PYTHONPATH": f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    proc = subprocess.run([sys.executable, str(STAGE / "solution_episodes.py"), "--suite", str(SUITE), "--out",
                           str(tmp_path), "--tasks", "2", "--device", "cpu"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    df = pd.read_parquet(tmp_path / "sft.parquet")
    assert len(df) == 2
    roles = [[m["role"] for m in msgs] for msgs in df["messages"]]
    assert roles == [["user", "assistant", "user", "assistant"]] * 2
    assert "```python" in df["messages"][0][3]["content"] and "ModelNew" in df["messages"][0][1]["content"]
    assert solution_episodes.first_reply("class Model(nn.Module): pass").count("ModelNew") == 1
    tok = AutoTokenizer.from_pretrained(str(work / "model"))
    data = {k.split("=", 1)[0].removeprefix("data."): k.split("=", 1)[1] for k in SFT_OVERRIDES if k.startswith("data.")}
    config = OmegaConf.create({"max_length": int(data["max_length"]), "truncation": data["truncation"],
                               "messages_key": "messages", "ignore_input_ids_mismatch": False, "pad_mode": "no_padding"})
    ds = MultiTurnSFTDataset(str(tmp_path / "sft.parquet"), tok, config)
    item = ds[0]
    ids, mask = item["input_ids"], item["loss_mask"]
    assert 0 < int(mask.sum()) < len(ids) <= int(data["max_length"])
    trained = tok.decode(ids[mask.bool()])
    assert "ModelNew" in trained and "Server feedback" not in trained
