"""Dr. Kernel RL with stock verl 0.9.1 (a Hydra main calling verl's trainer): what
``drkernel train --backend verl`` runs (its alias: ``python -m drkernel.train``).

    drkernel train --backend verl [--config-name drkernel_trainer] [key=value ...]
    drkernel train --backend verl --dry-run [key=value ...]     # print the composed config, exit 0

The config is ``drkernel/config/drkernel_trainer.yaml``: verl's ``ppo_trainer`` (found through
Hydra's search path) plus drkernel's overrides and its ``drkernel:`` node. The main checks the
``drkernel`` node, runs verl's ``validate_config``, saves the resolved config beside the run's logs
(``<trainer.default_local_dir>/resolved_config.yaml`` and the TensorBoard folder), then hands it
to verl's ``run_ppo`` with verl's v1 TaskRunner. drkernel's pieces enter the Ray processes through
the ``verl.plugins`` entry point (``drkernel.verl.plugin``), so nothing else has to be forwarded.

``--dry-run`` composes the same config with Hydra's compose API, runs the same checks that need no
GPU, prints the resolved YAML and exits 0 without importing Ray or starting anything.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any, Sequence

from drkernel.config import CONFIG_DIR

DEFAULT_CONFIG = "drkernel_trainer"


def compose(overrides: Sequence[str] = (), config_name: str = DEFAULT_CONFIG, config_dir: str | os.PathLike | None = None):
    """The composed (unresolved) config, as ``python -m drkernel.train`` would see it."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(Path(config_dir or CONFIG_DIR).resolve()), version_base=None):
        return hydra_compose(config_name=config_name, overrides=list(overrides))


def check_config(config: Any, *, gpu_checks: bool = True) -> None:
    """drkernel's checks of a composed trainer config (raises ValueError on a bad one).

    The ``drkernel`` node must have known keys only and build the step's config; with
    ``gpu_checks`` verl's own ``validate_config`` runs too (it sizes batches against the GPUs).
    """
    from drkernel.verl.config import drkernel_node, step_config

    if "drkernel" in config:
        node = drkernel_node(config)
        from drkernel.verl.grading import KINDS

        if node["grader"]["kind"] not in KINDS:
            raise ValueError(f"drkernel.grader.kind must be one of {', '.join(KINDS)}, got {node['grader']['kind']!r}")
        if node["grader"]["kind"] == "http" and not node["grader"]["url"]:
            raise ValueError("drkernel.grader.kind=http needs drkernel.grader.url")
        step_config(config, estimator=str(config.algorithm.adv_estimator), gamma=float(config.algorithm.gamma),
                    samples_per_prompt=int(config.actor_rollout_ref.rollout.n))
    if gpu_checks:
        from verl.trainer.main_ppo import need_critic, need_reference_policy
        from verl.utils.config import validate_config

        validate_config(config=config, use_reference_policy=need_reference_policy(config), use_critic=need_critic(config))


def save_resolved_config(config: Any) -> list[Path]:
    """Write the resolved config as YAML beside the run's checkpoints and TensorBoard logs."""
    from omegaconf import OmegaConf

    text = OmegaConf.to_yaml(config, resolve=True)
    trainer = config.trainer
    dirs = [Path(str(trainer.default_local_dir))]
    if "tensorboard" in list(trainer.get("logger", []) or []):
        dirs.append(Path(os.environ.get("TENSORBOARD_DIR", f"tensorboard_log/{trainer.project_name}/{trainer.experiment_name}")))
    written = []
    for d in dirs:
        d.mkdir(parents=True, exist_ok=True)
        (d / "resolved_config.yaml").write_text(text, encoding="utf-8")
        written.append(d / "resolved_config.yaml")
    return written


def split_config_args(argv: Sequence[str]) -> tuple[str, str | None, list[str]]:
    """(config name, config dir or None, the other arguments): Hydra's ``--config-name NAME`` /
    ``--config-name=NAME`` (``-cn``) and ``--config-path`` (``-cp``) taken out of ``argv``."""
    config_name, config_dir, rest = DEFAULT_CONFIG, None, []
    args = list(argv)
    i = 0
    while i < len(args):
        arg = args[i]
        key, eq, value = arg.partition("=")
        if key in ("--config-name", "-cn", "--config-path", "-cp"):
            if not eq:
                if i + 1 >= len(args):
                    raise ValueError(f"{key} needs a value")
                value = args[i + 1]
                i += 1
            if key in ("--config-name", "-cn"):
                config_name = value
            else:
                config_dir = value
        else:
            rest.append(arg)
        i += 1
    return config_name, config_dir, rest


def dry_run(argv: Sequence[str]) -> int:
    """Compose, check (no GPU checks), print the resolved config; 0 on success.

    verl's plugins are not loaded here (``VERL_USE_EXTERNAL_PLUGINS=none`` unless set): composing
    needs only verl's config package, and the plugin would pull in Ray and TransferQueue. Raises
    ``ModuleNotFoundError`` without the ``train`` extra (omegaconf, hydra, verl), ``ValueError`` for
    a config that fails the checks.
    """
    os.environ.setdefault("VERL_USE_EXTERNAL_PLUGINS", "none")
    from omegaconf import OmegaConf

    config_name, config_dir, overrides = split_config_args(argv)
    config = compose(overrides, config_name, config_dir)
    check_config(config, gpu_checks=False)
    sys.stdout.write(OmegaConf.to_yaml(config, resolve=True))
    return 0


def run(config: Any) -> None:
    """Check, save and train (what the Hydra main does with its config)."""
    from verl.trainer.main_ppo import TaskRunnerV1, run_ppo
    from verl.utils.device import auto_set_device

    auto_set_device(config)
    check_config(config)
    for path in save_resolved_config(config):
        print(f"drkernel: resolved config saved to {path}")
    run_ppo(config, task_runner_class=TaskRunnerV1)


def hydra_main(argv: Sequence[str]) -> int:
    """Run the trainer through Hydra's main with ``argv`` as its command line (overrides,
    ``--config-name``, ``--cfg job``, ``--multirun`` ...); Hydra reports its own errors."""
    import hydra

    @hydra.main(config_path=str(CONFIG_DIR), config_name=DEFAULT_CONFIG, version_base=None)
    def _hydra_main(config: Any) -> None:
        run(config)

    saved = sys.argv
    sys.argv = [saved[0] if saved else "drkernel", *argv]
    try:
        _hydra_main()
    finally:
        sys.argv = saved
    return 0


__all__ = ["DEFAULT_CONFIG", "compose", "check_config", "save_resolved_config", "split_config_args", "dry_run", "run",
           "hydra_main"]
