"""``drkernel train``: the one-process trainer (default) or verl on a cluster (``--backend verl``).

    drkernel train --suite envs/single_ops --tasks 01_relu,04_silu --max-steps 2 --device cpu --out runs/cpu
    drkernel train --env toy --max-steps 100 --lr 1e-2 --out runs/toy
    drkernel train --suite envs/single_ops --dry-run             # print the TrainConfig, train nothing
    drkernel train --backend verl [--dry-run] [--config-name NAME] [key=value ...]   # Hydra overrides

The local backend (:mod:`drkernel.local.trainer`): every leaf of
:class:`~drkernel.local.trainer.TrainConfig` is a flat ``--kebab-case`` flag whose help is the field's
docstring (:func:`drkernel.config.flags.flat_fields`: ``--clip-low``, ``--mrs-rs-lower``,
``--reward-coverage-weight``, ...). ``--env`` defaults to
``suite`` when ``--suite`` is given, else ``toy``; ``--tasks`` needs ``--suite``. The suite and the
task filter are checked before anything is built: an unknown suite or a filter part matching no task
exits 2 naming it and what exists.

The verl backend (:mod:`drkernel.verl.launch`; ``python -m drkernel.train`` is its alias): the
arguments after the drkernel flags are Hydra's (``key=value`` overrides, ``--config-name``, ``--cfg
job`` ...); ``--dry-run`` composes and checks the config without a GPU and prints it. Without the
``train`` extra (omegaconf, hydra, verl) it exits 2 naming ``pip install -e '.[train]'``.

``--local`` (the old way to ask for the local trainer) is accepted and does nothing, with a one-line
deprecation notice. Exit codes: :mod:`drkernel.cli.common`.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from drkernel.cli.common import MissingExtra, UsageError, load_suite_arg, notice, select_tasks_arg

PASSTHROUGH = True
"""Arguments the parser does not know reach :func:`main` as ``args.passthrough`` (Hydra's, for verl)."""

PROG = "drkernel train"

# flag -> metavar in --help (the help text is the field's docstring: drkernel.config.flags)
_SHORT = {"max_steps": "N", "device": "cpu|cuda", "out": "DIR", "suite": "DIR", "model": "PATH"}



def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Flags of ``drkernel train``: ``--backend``, ``--dry-run``, ``--local`` and one per TrainConfig field."""
    from drkernel.local.trainer import TrainConfig

    parser.description = (
        "Train a policy: the one-process trainer (default: one GPU or CPU) or verl on a cluster (--backend verl)."
        "\n\n  drkernel train --suite envs/single_ops --tasks 01_relu --max-steps 2 --device cpu --out runs/cpu"
        "\n  drkernel train --backend verl [--dry-run] [key=value ...]   (Hydra overrides)")
    parser.add_argument("--backend", choices=("local", "verl"), default="local",
                        help="local: the one-process trainer in this process (one GPU or CPU; the flags below); "
                             "verl: verl + vLLM + Ray on a cluster, configured by Hydra overrides key=value "
                             "(what `python -m drkernel.train` runs; needs the 'train' extra)")
    parser.add_argument("--dry-run", action="store_true",
                        help="check the configuration and print it, train nothing (local: the TrainConfig as "
                             "JSON; verl: the composed Hydra config as YAML)")
    parser.add_argument("--local", action="store_true",
                        help="deprecated, does nothing: the local trainer is the default backend")
    from drkernel.config.flags import flat_fields

    for f in flat_fields(TrainConfig):
        flag = "--" + f.name.replace("_", "-")
        default = f.default
        help_text = f.help + (f" (default: {default})" if default is not None else "")
        if f.type in ("bool", bool):
            parser.add_argument(flag, dest=f.name, action=argparse.BooleanOptionalAction, default=default,
                                help=help_text)
            continue
        parser.add_argument(flag, dest=f.name, type=_parser_for(f.type), default=default,
                            metavar=_SHORT.get(f.name), help=help_text)
    parser.set_defaults(env=None)  # decided from --suite below


def _parser_for(type_name: Any) -> Any:
    name = str(type_name)
    if "bool" in name:
        return _optional(_bool)
    if "float" in name:
        return _optional(float) if "None" in name else float
    if "int" in name:
        return _optional(int) if "None" in name else int
    return _optional(str) if "None" in name else str


def _bool(text: str) -> bool:
    if text.lower() in ("1", "true", "yes", "on"):
        return True
    if text.lower() in ("0", "false", "no", "off"):
        return False
    raise argparse.ArgumentTypeError(f"expected true/false/none, got {text!r}")


def _optional(kind: Any) -> Any:
    def parse(text: str) -> Any:
        return None if text.lower() in ("none", "null") else kind(text)

    parse.__name__ = kind.__name__
    return parse


def main(args: argparse.Namespace) -> int:
    """Run the chosen backend; returns the exit code (raises the errors of :mod:`drkernel.cli.common`)."""
    if getattr(args, "local", False):
        if args.backend == "verl":
            raise UsageError("--local contradicts --backend verl (--local is deprecated: leave it out)")
        notice(PROG, "--local is deprecated and does nothing: the local trainer is the default backend")
    if args.backend == "verl":
        return _verl(args)
    extra = list(getattr(args, "passthrough", None) or [])
    if extra:
        raise UsageError(f"unrecognized arguments: {' '.join(extra)} (Hydra overrides key=value need --backend verl)")
    return _local(args)


def _local_values(args: argparse.Namespace) -> dict[str, Any]:
    from drkernel.local.trainer import TrainConfig

    from drkernel.config.flags import flat_fields

    return {f.name: getattr(args, f.name) for f in flat_fields(TrainConfig) if hasattr(args, f.name)}


def _local(args: argparse.Namespace) -> int:
    from drkernel.local.trainer import TrainConfig, Trainer

    values = _local_values(args)
    if values.get("tasks") and not values.get("suite"):
        raise UsageError("--tasks needs --suite (the suite directory whose tasks it selects, e.g. envs/single_ops)")
    if values.get("env") is None:
        values["env"] = "suite" if values.get("suite") else "toy"
    if values["env"] == "suite" and values.get("suite"):
        suite = load_suite_arg(values["suite"])
        select_tasks_arg(suite, values.get("tasks"))
    elif values["env"] == "toy" and values.get("suite"):
        raise UsageError("--suite is for --env suite (the toy task has no suite)")
    try:
        config = TrainConfig.from_flat(values)
    except (ValueError, TypeError) as exc:
        raise UsageError(str(exc)) from None
    if args.dry_run:
        print(json.dumps(config.to_dict(), indent=2, default=str))
        return 0
    try:
        import transformers  # noqa: F401
    except ModuleNotFoundError as exc:
        raise MissingExtra("local", "the local trainer", exc.name) from None
    trainer = Trainer(config)
    history = trainer.train()
    last = history[-1] if history else {}
    print(f"done: {len(history)} steps, last reward/mean {last.get('reward/mean', float('nan')):.4f}, "
          f"outputs in {config.out}")
    return 0


def _verl(args: argparse.Namespace) -> int:
    from drkernel.local.trainer import TrainConfig

    from drkernel.config.flags import flat_fields

    defaults = {f.name: f.default for f in flat_fields(TrainConfig)}
    local_flags = ["--" + name.replace("_", "-") for name, value in _local_values(args).items()
                   if name != "env" and value != defaults.get(name)]
    if getattr(args, "env", None) is not None:
        local_flags.insert(0, "--env")
    if local_flags:
        raise UsageError(f"{', '.join(local_flags)}: flag(s) of the local trainer; --backend verl takes Hydra "
                         f"overrides key=value (drkernel/config/drkernel_trainer.yaml)")
    hydra_args = list(getattr(args, "passthrough", None) or [])
    try:
        from drkernel.verl import launch

        if args.dry_run:
            return launch.dry_run(hydra_args)
        return launch.hydra_main(hydra_args)
    except ModuleNotFoundError as exc:
        name = (exc.name or "").split(".")[0]
        if name and name != "drkernel":
            raise MissingExtra("train", "drkernel train --backend verl", exc.name) from None
        raise
    except ValueError as exc:  # drkernel's checks of the composed config, a bad --config-name form
        raise UsageError(str(exc)) from None
    except Exception as exc:
        if type(exc).__module__.split(".")[0] in ("hydra", "omegaconf"):  # a bad override, an unknown key
            raise UsageError(f"{type(exc).__name__}: {exc}") from None
        raise


__all__ = ["add_arguments", "main", "PASSTHROUGH"]
