"""``drkernel train --local``: the one-process trainer from the command line.

    drkernel train --local --suite envs/single_ops --max-steps 2 --device cpu --out runs/cpu
    drkernel train --local --env toy --max-steps 100 --lr 1e-2 --out runs/toy

Every leaf of :class:`~drkernel.local.trainer.TrainConfig` is a flat ``--kebab-case`` flag whose help
is the field's docstring (:func:`drkernel.config.flags.flat_fields`: ``--clip-low``, ``--mrs-rs-lower``,
``--reward-coverage-weight``, ...). Cluster training is ``python -m drkernel.train`` (verl).
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

# flag -> metavar in --help (the help text is the field's docstring: drkernel.config.flags)
_SHORT = {"max_steps": "N", "device": "cpu|cuda", "out": "DIR", "suite": "DIR", "model": "PATH"}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Flags of ``drkernel train``: ``--local`` and one per TrainConfig field."""
    from drkernel.local.trainer import TrainConfig

    parser.add_argument("--local", action="store_true",
                        help="train in this process (one GPU or CPU); required for now: cluster training "
                             "is `python -m drkernel.train`")
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
    """Run the trainer; returns the exit status (2 with a one-line reason for unusable input)."""
    from drkernel.local.trainer import TrainConfig, Trainer

    if not getattr(args, "local", False):
        print("drkernel train: only --local is implemented here; cluster training (verl, vLLM, Ray) is "
              "`python -m drkernel.train`", file=sys.stderr)
        return 2
    from drkernel.config.flags import flat_fields

    values = {f.name: getattr(args, f.name) for f in flat_fields(TrainConfig) if hasattr(args, f.name)}
    if values.get("env") is None:
        values["env"] = "suite" if values.get("suite") else "toy"
    try:
        config = TrainConfig.from_flat(values)
    except ValueError as exc:
        print(f"drkernel train: {exc}", file=sys.stderr)
        return 2
    try:
        import transformers  # noqa: F401
    except ImportError:
        print("drkernel train --local needs the 'local' extra: pip install 'drkernel[local]'", file=sys.stderr)
        return 2
    trainer = Trainer(config)
    history = trainer.train()
    last = history[-1] if history else {}
    print(f"done: {len(history)} steps, last reward/mean {last.get('reward/mean', float('nan')):.4f}, "
          f"outputs in {config.out}")
    return 0


def _standalone(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="drkernel train", description=__doc__.split("\n\n")[0])
    add_arguments(parser)
    return main(parser.parse_args(argv))


if __name__ == "__main__":
    raise SystemExit(_standalone())
