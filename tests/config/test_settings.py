"""One source of defaults: the settings groups (drkernel.config.settings), the local TrainConfig and
its flat flags, verl's drkernel: node (DEFAULTS) and the shipped YAML all agree, field by field."""

from __future__ import annotations

import argparse
import dataclasses
import inspect
import json
import subprocess
import sys
from pathlib import Path

import pytest

from drkernel.config.check import check_trainer_yaml, diff, main as check_main, trainer_yaml
from drkernel.config.flags import flat_fields, flat_values, unflagged_fields
from drkernel.config.settings import (
    AgentNode,
    AgentSettings,
    DrKernelNode,
    GroupFilterSettings,
    MRSSettings,
    PRSSettings,
    StepSettings,
    from_plain,
    to_plain,
)
from drkernel.correction.mismatch import MismatchConfig
from drkernel.losses import PolicyLossConfig
from drkernel.rewards import REWARD_FUNCTIONS, PRSConfig, RewardConfig, compute_reward
from drkernel.step import DrKernelStepConfig
from drkernel.verl import config as verl_config

REPO = Path(__file__).resolve().parents[2]

# the flags of `drkernel train` (then `--local`) before TrainConfig was nested: every one must keep working
OLD_FLAGS = [
    "out", "env", "suite", "tasks", "max_steps", "device", "model", "precision", "tiny_hidden", "tiny_layers",
    "tokenizer_vocab", "threads", "generation_threads", "seed", "prompts_per_step", "group_size", "num_turns",
    "max_new_tokens", "temperature", "max_context_tokens", "concurrency", "continuous_batching", "grader_capacity",
    "grade_profile", "estimator", "gamma", "mrs", "prs", "group_filter", "target_groups", "lr", "weight_decay",
    "grad_clip", "ppo_epochs", "mini_batches", "micro_batch_size", "clip_low", "clip_high", "clip_c", "agg_mode",
    "loss_scale_factor", "entropy_coef", "lora", "lora_r", "lora_alpha", "solution_mix", "save_every",
    "tensorboard", "progress",
]


def _train_config():
    from drkernel.local.trainer import TrainConfig

    return TrainConfig


def _defaults(cls) -> dict:
    return {f.name: getattr(cls(), f.name) for f in dataclasses.fields(cls)}


# --------------------------------------------------------------------------- YAML == DEFAULTS == dataclasses


def test_the_shipped_yaml_agrees_with_the_dataclass_defaults():
    assert check_trainer_yaml() == []
    assert diff(verl_config.DEFAULTS, trainer_yaml()["drkernel"], "drkernel") == []
    assert check_main([]) == 0


def test_the_checker_names_each_disagreeing_field(tmp_path, capsys):
    text = (REPO / "drkernel" / "config" / "drkernel_trainer.yaml").read_text()
    bad = (text.replace("rs_lower: 0.999", "rs_lower: 0.99").replace("clip_ratio_high: 0.28", "clip_ratio_high: 0.3")
           .replace("    speedup_threshold: null\n", "    speedup_threshold: null\n    typo: 1\n")
           .replace("    coverage_weight: 0.5\n", ""))
    path = tmp_path / "t.yaml"
    path.write_text(bad)
    problems = check_trainer_yaml(path)
    assert len(problems) == 4, problems
    joined = "\n".join(problems)
    assert "drkernel.mrs.rs_lower: the file has 0.99, the dataclass default is 0.999" in joined
    assert "actor_rollout_ref.actor.clip_ratio_high" in joined and "loss.clip_high" in joined
    assert "drkernel.prs.typo: not a setting" in joined
    assert "drkernel.reward.coverage_weight: missing in the file" in joined
    assert check_main(["--yaml", str(path)]) == 1
    assert "drkernel.mrs.rs_lower" in capsys.readouterr().out


def test_verl_defaults_are_generated_from_the_settings_groups():
    d = verl_config.DEFAULTS
    assert d == to_plain(DrKernelNode())
    assert set(d) == {"agent", "grader", "reward", "mask_void_turn", "mrs", "prs", "group_filter", "seed"}
    step = StepSettings()
    for name in ("mask_void_turn", "mrs", "prs", "group_filter"):
        assert diff(to_plain(getattr(step, name)), d[name], name) == []
    assert d["reward"] == RewardConfig().node()
    # the node parses back to the same settings, and into the same step config as StepSettings
    assert from_plain(DrKernelNode, d) == DrKernelNode()
    assert verl_config.step_config({}, samples_per_prompt=16) == step.step_config(samples_per_prompt=16,
                                                                                   target_num_groups=None)


def test_the_groups_take_their_defaults_from_the_consumers():
    from drkernel.agent.episode import EpisodeConfig

    mrs, prs = MRSSettings(), PRSSettings()
    assert {k: getattr(mrs, k) for k in _defaults(MismatchConfig)} == _defaults(MismatchConfig)
    assert {k: getattr(prs, k) for k in _defaults(PRSConfig)} == _defaults(PRSConfig)
    assert mrs.config() == MismatchConfig() and prs.config() == PRSConfig()
    step_cfg = DrKernelStepConfig()
    gf = GroupFilterSettings()
    assert (gf.enable, gf.std_threshold, gf.min_group_size) == (step_cfg.group_filter, step_cfg.filter_std_threshold,
                                                                step_cfg.min_group_size)
    step = StepSettings()
    assert (step.estimator, step.gamma, step.mask_void_turn) == (step_cfg.estimator, step_cfg.gamma,
                                                                  step_cfg.mask_void_turn)
    agent, episode = AgentNode(), EpisodeConfig()
    for name in ("max_turns", "max_feedback_chars", "no_code_reward", "prompt_template"):
        assert getattr(agent, name) == getattr(episode, name), name
    # the local trainer nests the same groups: same defaults (its reply cap is its own, 256 tokens)
    local = _train_config().from_flat(env="toy")
    assert local.step == step and local.loss == PolicyLossConfig() and local.reward == RewardConfig()
    assert dataclasses.replace(local.agent, max_tokens_per_turn=8192) == AgentSettings()


def test_reward_config_defaults_are_the_reward_functions_keyword_defaults():
    cfg = RewardConfig()
    for name, fn in REWARD_FUNCTIONS.items():
        for p in inspect.signature(fn).parameters.values():
            if p.kind is p.KEYWORD_ONLY:
                assert getattr(cfg, p.name) == p.default, (name, p.name)
    assert RewardConfig(name="tiered", perf_degrade=-0.2).node() == {
        "name": "tiered", "tiers": cfg.tiers, "perf_degrade": -0.2, "correctness_fail": -0.3,
        "compilation_fail": -0.5, "hacked_penalty": -1.0}
    assert compute_reward({"correct": True, "speedup": 2.0, "coverage": 0.6}) == pytest.approx(1.8)
    node = verl_config.drkernel_node({"drkernel": {"reward": {"name": "tiered"}}})
    assert verl_config.reward_config(node) == RewardConfig(name="tiered")


def test_an_unknown_key_at_any_depth_is_named():
    with pytest.raises(ValueError, match=r"unknown keys in drkernel.mrs: \['typo'\]"):
        verl_config.drkernel_node({"drkernel": {"mrs": {"typo": 1}}})
    with pytest.raises(ValueError, match=r"unknown keys in drkernel: \['typo'\]"):
        verl_config.drkernel_node({"typo": 1})


def test_importing_the_config_modules_needs_no_verl_or_omegaconf():
    code = ("import sys; import drkernel.config, drkernel.config.settings, drkernel.config.flags, "
            "drkernel.config.check, drkernel.verl.config; "
            "bad = [m for m in ('verl', 'omegaconf', 'hydra') if m in sys.modules]; assert not bad, bad")
    subprocess.run([sys.executable, "-c", code], check=True, cwd=REPO)


# --------------------------------------------------------------------------- TrainConfig files


def _non_default_config():
    return _train_config().from_flat(
        env="toy", out="runs/x", estimator="grpo", gamma=0.9, mrs_rs="turn", mrs_rs_lower=0.99, mrs_token_veto=None,
        prs=False, prs_threshold=0.4, group_filter_std_threshold=0.01, clip_high=0.3, clip_c=None,
        reward="weighted", reward_speedup_eps=0.05, grade_profile=False, num_turns=2, max_new_tokens=16,
        max_feedback_chars=500, target_groups=3,
        grader={"options": {"timing_trials": 3}})


def test_train_config_round_trips_through_json_and_yaml(tmp_path):
    import yaml

    TrainConfig = _train_config()
    cfg = _non_default_config()
    assert cfg.grader.options == {"timing_trials": 3} and cfg.step.mrs.token_veto is None
    assert TrainConfig.from_dict(json.loads(json.dumps(cfg.to_dict()))) == cfg
    assert TrainConfig.from_dict(yaml.safe_load(yaml.safe_dump(cfg.to_dict()))) == cfg
    (tmp_path / "config.yaml").write_text(yaml.safe_dump({**cfg.to_dict(), "resolved": {"x": 1}}))
    assert TrainConfig.load(tmp_path / "config.yaml") == cfg
    # tiered knobs are tuples again after JSON (lists)
    tiered = TrainConfig.from_flat(env="toy", reward="tiered")
    assert TrainConfig.from_dict(json.loads(json.dumps(tiered.to_dict()))) == tiered


def test_a_run_saves_a_config_that_loads_back(tmp_path):
    pytest.importorskip("transformers")
    from drkernel.local.trainer import Trainer

    cfg = dataclasses.replace(_non_default_config(), out=str(tmp_path / "run"), tiny_hidden=16, tiny_layers=1,
                              threads=1, progress=False, tensorboard=False)
    trainer = Trainer(cfg)
    try:
        saved = json.loads((tmp_path / "run" / "config.json").read_text())
        assert {k: v for k, v in saved.items() if k != "resolved"} == cfg.to_dict()
        assert _train_config().load(tmp_path / "run") == cfg
        assert _train_config().load(tmp_path / "run" / "config.yaml") == cfg
        assert trainer.step_config == cfg.step_config()
    finally:
        trainer.close()


# --------------------------------------------------------------------------- flat flags


def _other_value(flag):
    special = {"env": "toy", "precision": "fp32", "estimator": "grpo", "gamma": 0.5, "mrs_rs": "token",
               "mrs_is_level": "token", "prs_mode": "geometric", "agg_mode": "token-mean", "reward": "weighted",
               "clip_low": 0.1, "device": "cuda"}
    if flag.name in special:
        return special[flag.name]
    t, d = flag.type, flag.default
    if t == "bool" or "bool" in t:
        return not d if d is not None else False
    if "int" in t:
        return (d or 0) + 2
    if "float" in t:
        return (d or 0.0) + 0.5
    return "x" if d is None else f"{d}x"


def test_every_flat_flag_maps_to_exactly_one_nested_field():
    TrainConfig = _train_config()
    flags = flat_fields(TrainConfig)
    names = [f.name for f in flags]
    paths = [f.path for f in flags]
    assert len(set(names)) == len(names) and len(set(paths)) == len(paths)
    assert set(OLD_FLAGS) <= set(names), set(OLD_FLAGS) - set(names)
    assert unflagged_fields(TrainConfig) == ["reward.tiers", "grader.options"]
    base = TrainConfig.from_flat(env="toy")
    before = flat_values(base)
    assert before == {f.name: f.default for f in flags if f.name != "env"} | {"env": "toy"}
    for flag in flags:
        value = _other_value(flag)
        cfg = TrainConfig.from_flat(**{"env": "toy", flag.name: value})
        node = cfg
        for part in flag.path.split("."):
            node = getattr(node, part)
        assert node == value, flag
        changed = {k for k, v in flat_values(cfg).items() if v != before[k]}
        assert changed == ({flag.name} if flag.name != "env" else set()), (flag, changed)


def test_every_flag_parses_on_the_command_line_into_its_field():
    from drkernel.cli import train as cli

    TrainConfig = _train_config()
    parser = argparse.ArgumentParser()
    cli.add_arguments(parser)
    for flag in flat_fields(TrainConfig):
        value = _other_value(flag)
        opt = "--" + flag.name.replace("_", "-")
        argv = ["--env", "toy"]
        if flag.type == "bool":
            argv += [opt if value else "--no-" + flag.name.replace("_", "-")]
        elif flag.name != "env":
            argv += [opt, str(value)]
        args = parser.parse_args(argv)
        cfg = TrainConfig.from_flat({f.name: getattr(args, f.name) for f in flat_fields(TrainConfig)})
        node = cfg
        for part in flag.path.split("."):
            node = getattr(node, part)
        assert node == value, (flag, node)


def test_from_flat_rejects_unknown_names_and_mixed_groups():
    TrainConfig = _train_config()
    with pytest.raises(ValueError, match="unknown setting 'clip_lo'"):
        TrainConfig.from_flat(env="toy", clip_lo=0.1)
    with pytest.raises(ValueError, match="given whole"):
        TrainConfig.from_flat(env="toy", loss=PolicyLossConfig(), clip_low=0.1)
    cfg = TrainConfig.from_flat(env="toy", loss=PolicyLossConfig(clip_high=0.3), agent={"max_turns": 2})
    assert cfg.loss.clip_high == 0.3 and cfg.agent.max_turns == 2 and cfg.agent.max_tokens_per_turn == 256


# --------------------------------------------------------------------------- MRS/PRS reach the step unchanged


OVERRIDES = [
    ({}, {}),
    (dict(mrs_rs="turn", mrs_rs_lower=0.99, mrs_rs_upper=1.01, mrs_token_veto=1e-3, mrs_is_level="token",
          mrs_is_upper=3.0, prs_threshold=0.5, prs_factor=0.2, prs_mode="geometric_correct",
          prs_speedup_threshold=1.5, mask_void_turn=False, group_filter_std_threshold=0.01,
          group_filter_min_group_size=2, estimator="grpo", gamma=0.9),
     dict(mrs={"rs": "turn", "rs_lower": 0.99, "rs_upper": 1.01, "token_veto": 1e-3, "is_level": "token",
               "is_upper": 3.0},
          prs={"threshold": 0.5, "factor": 0.2, "mode": "geometric_correct", "speedup_threshold": 1.5},
          mask_void_turn=False, group_filter={"std_threshold": 0.01, "min_group_size": 2})),
    (dict(mrs=False, prs=False, group_filter=False),
     dict(mrs={"enable": False}, prs={"enable": False}, group_filter={"enable": False})),
]


@pytest.mark.parametrize("local, node", OVERRIDES)
def test_mrs_and_prs_reach_the_step_unchanged_from_both_config_paths(local, node):
    TrainConfig = _train_config()
    cfg = TrainConfig.from_flat(env="suite", suite=str(REPO / "envs" / "single_ops"), group_size=16, **local)
    from_local = cfg.step_config()
    from_verl = verl_config.step_config({"drkernel": node}, estimator=cfg.step.estimator, gamma=cfg.step.gamma,
                                        samples_per_prompt=16)
    assert from_local == from_verl
    if not local:  # the recipe
        assert from_local.mismatch == MismatchConfig() and from_local.prs == PRSConfig()
    elif local.get("mrs") is False:
        assert from_local.mismatch is None and from_local.prs is None and not from_local.group_filter
    else:
        assert from_local.mismatch == MismatchConfig(rs="turn", rs_lower=0.99, rs_upper=1.01, token_veto=1e-3,
                                                     is_level="token", is_upper=3.0)
        assert from_local.prs == PRSConfig(threshold=0.5, factor=0.2, mode="geometric_correct", speedup_threshold=1.5)
        assert (from_local.estimator, from_local.gamma, from_local.min_group_size) == ("grpo", 0.9, 2)


def test_prs_is_off_locally_without_coverage():
    TrainConfig = _train_config()
    assert TrainConfig.from_flat(env="toy").step_config().prs is None
    suite = str(REPO / "envs" / "single_ops")
    assert TrainConfig.from_flat(env="suite", suite=suite, grade_profile=False).step_config().prs is None
    assert TrainConfig.from_flat(env="suite", suite=suite).step_config().prs == PRSConfig()


def test_argument_parser_offers_each_field_of_a_flat_dataclass():
    """examples' ``Args``: one flag per field, typed, booleans as --x/--no-x, help from the docstring."""
    from dataclasses import dataclass

    from drkernel.config.flags import argument_parser

    @dataclass
    class Args:
        out: str = "runs/x"
        """Output directory."""
        steps: int = 3
        lr: float = 1e-3
        progress: bool = True

    parser = argument_parser(Args, "demo")
    assert Args(**vars(parser.parse_args([]))) == Args()
    got = Args(**vars(parser.parse_args(["--out", "o", "--steps", "7", "--lr", "0.5", "--no-progress"])))
    assert got == Args(out="o", steps=7, lr=0.5, progress=False)
    text = parser.format_help()
    assert "Output directory. (default: runs/x)" in text and "steps (default: 3)" in text and parser.description == "demo"
