"""Every shipped config composes against verl 0.9.1's own configs, and verl's dataclasses accept it."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("verl")

from omegaconf import OmegaConf  # noqa: E402

from drkernel.config import CONFIG_DIR  # noqa: E402
from drkernel.config.check import diff  # noqa: E402
from drkernel.train import check_config, compose, save_resolved_config  # noqa: E402
from drkernel.verl.config import DEFAULTS, drkernel_node, step_config  # noqa: E402

SHIPPED = sorted(p.stem for p in Path(CONFIG_DIR).glob("*.yaml"))


def test_the_shipped_configs_are_the_expected_ones() -> None:
    assert SHIPPED == ["drkernel_sft", "drkernel_trainer"]


@pytest.mark.parametrize("name", SHIPPED)
def test_every_shipped_config_composes_and_resolves(name: str) -> None:
    cfg = compose(["data.train_files=/tmp/x.parquet"], config_name=name)
    OmegaConf.to_container(cfg, resolve=True)  # every interpolation resolves
    check_config(cfg, gpu_checks=False)


def test_trainer_config_values_and_verl_dataclasses() -> None:
    from verl.utils.config import omega_conf_to_dataclass

    cfg = compose([])
    # the paper's hyper-parameters as composed values
    assert cfg.algorithm.adv_estimator == "trloo" and cfg.algorithm.gamma == 1.0
    assert cfg.data.train_batch_size == 16 and cfg.actor_rollout_ref.rollout.n == 16
    assert cfg.actor_rollout_ref.actor.optim.lr == pytest.approx(1e-6)
    assert (cfg.actor_rollout_ref.actor.clip_ratio_low, cfg.actor_rollout_ref.actor.clip_ratio_high) == (0.2, 0.28)
    assert cfg.actor_rollout_ref.rollout.agent.default_agent_loop == "drkernel_kernel_agent"
    assert cfg.trainer.v1.trainer_mode == "drkernel_sync"
    assert cfg.trainer.v1.sampler.max_off_policy_threshold == 1  # surplus groups dropped, as in the paper
    assert cfg.actor_rollout_ref.actor.loss_agg_mode == "seq-mean-token-sum-norm"
    assert cfg.actor_rollout_ref.actor.loss_scale_factor == 1000 * cfg.drkernel.agent.max_turns
    # verl's rollout correction is off (MRS runs in the step); no dead IS threshold (§9.1)
    assert cfg.algorithm.rollout_correction.rollout_is is None and cfg.algorithm.rollout_correction.rollout_rs is None
    # verl's own nodes still convert to verl's dataclasses (no foreign keys leaked into them)
    for node in (cfg.algorithm, cfg.actor_rollout_ref.actor, cfg.actor_rollout_ref.rollout):
        omega_conf_to_dataclass(node)
    # the drkernel node: YAML and dataclass defaults agree (each disagreeing key named), and build the step's config
    assert diff(DEFAULTS, OmegaConf.to_container(cfg.drkernel, resolve=True), "drkernel") == []
    assert drkernel_node(cfg) == DEFAULTS
    sc = step_config(cfg, estimator="trloo", gamma=1.0, samples_per_prompt=16)
    assert sc.mismatch.rs == "geometric" and sc.mismatch.token_veto == pytest.approx(1e-4)
    assert sc.mismatch.is_level is None
    assert sc.prs.threshold == pytest.approx(0.3) and sc.prs.factor == pytest.approx(0.1)
    assert sc.group_filter and sc.filter_std_threshold == pytest.approx(1e-3)
    assert sc.resolved_min_group_size() == 9  # n // 2 + 1


def test_bad_drkernel_node_is_rejected() -> None:
    with pytest.raises(ValueError, match="unknown keys"):
        drkernel_node({"drkernel": {"typo": 1}})
    cfg = compose(["drkernel.grader.kind=http"])
    with pytest.raises(ValueError, match="url"):
        check_config(cfg, gpu_checks=False)


def test_resolved_config_is_saved_beside_the_logs(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("TENSORBOARD_DIR", str(tmp_path / "tb"))
    cfg = compose([f"trainer.default_local_dir={tmp_path / 'ckpt'}"])
    paths = save_resolved_config(cfg)
    assert {p.parent.name for p in paths} == {"ckpt", "tb"}
    saved = OmegaConf.load(paths[0])
    assert saved.drkernel.mrs.rs == "geometric" and saved.actor_rollout_ref.rollout.response_length == 26624
