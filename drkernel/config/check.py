"""Check the shipped Hydra YAML against the dataclass defaults, naming each key that disagrees.

    python -m drkernel.config.check            # exit 1 and one line per disagreeing key
    python -m drkernel.config.check --print    # the drkernel: node the dataclasses give, as YAML

``drkernel/config/drkernel_trainer.yaml`` stays a hand-written file (verl/Hydra reads it, and its
comments explain the recipe), but its values are not a source of defaults: its ``drkernel:`` node
must equal :class:`drkernel.config.settings.DrKernelNode`'s defaults (``drkernel.verl.config.DEFAULTS``),
and the verl keys that carry a shared setting (``algorithm.adv_estimator``/``gamma``, the actor's
clip ratios and entropy coefficient) must equal :class:`~drkernel.config.settings.StepSettings`'s
and :class:`drkernel.losses.PolicyLossConfig`'s. Needs PyYAML only (the node has no interpolations).
"""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from drkernel.config import CONFIG_DIR

__all__ = ["check_trainer_yaml", "diff", "render_node", "trainer_yaml"]

TRAINER_YAML = CONFIG_DIR / "drkernel_trainer.yaml"

# verl key of the shipped YAML -> (settings group, field): verl's nodes that hold a shared setting
VERL_KEYS = {
    "algorithm.adv_estimator": ("step", "estimator"),
    "algorithm.gamma": ("step", "gamma"),
    "actor_rollout_ref.actor.clip_ratio_low": ("loss", "clip_low"),
    "actor_rollout_ref.actor.clip_ratio_high": ("loss", "clip_high"),
    "actor_rollout_ref.actor.clip_ratio_c": ("loss", "clip_c"),
    "actor_rollout_ref.actor.entropy_coeff": ("loss", "entropy_coef"),
}


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, bool) or isinstance(b, bool):
        return a is b
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return a == b or math.isclose(a, b, rel_tol=1e-12, abs_tol=0.0)
    return a == b


def diff(expected: Any, actual: Any, path: str = "") -> list[str]:
    """One line per key where ``actual`` (a file's values) differs from ``expected`` (the
    dataclass defaults): a different value, a key the file lacks, or a key the dataclasses lack."""
    if isinstance(expected, Mapping) and isinstance(actual, Mapping):
        out: list[str] = []
        for key in expected:
            sub = f"{path}.{key}" if path else str(key)
            if key not in actual:
                out.append(f"{sub}: missing in the file (default {expected[key]!r})")
            else:
                out.extend(diff(expected[key], actual[key], sub))
        for key in actual:
            if key not in expected:
                sub = f"{path}.{key}" if path else str(key)
                out.append(f"{sub}: not a setting (the file has {actual[key]!r}; no dataclass field)")
        return out
    if isinstance(expected, (list, tuple)) and isinstance(actual, (list, tuple)) and len(expected) == len(actual):
        return [line for i, (e, a) in enumerate(zip(expected, actual)) for line in diff(e, a, f"{path}[{i}]")]
    if not _same(expected, actual):
        return [f"{path}: the file has {actual!r}, the dataclass default is {expected!r}"]
    return []


def trainer_yaml(path: str | Path | None = None) -> dict[str, Any]:
    """The shipped trainer YAML as plain containers (PyYAML)."""
    import yaml

    return yaml.safe_load(Path(path or TRAINER_YAML).read_text(encoding="utf-8")) or {}


def _get(tree: Mapping[str, Any], dotted: str) -> Any:
    node: Any = tree
    for part in dotted.split("."):
        if not isinstance(node, Mapping) or part not in node:
            raise KeyError(dotted)
        node = node[part]
    return node


def check_trainer_yaml(path: str | Path | None = None) -> list[str]:
    """Every disagreement between the trainer YAML and the dataclass defaults (empty: they agree)."""
    from drkernel.config.settings import StepSettings
    from drkernel.losses import PolicyLossConfig
    from drkernel.verl.config import DEFAULTS

    data = trainer_yaml(path)
    problems = diff(DEFAULTS, data.get("drkernel") or {}, "drkernel")
    groups = {"step": StepSettings(), "loss": PolicyLossConfig()}
    for key, (group, name) in VERL_KEYS.items():
        expected = getattr(groups[group], name)
        try:
            actual = _get(data, key)
        except KeyError:
            problems.append(f"{key}: missing in the file ({group}.{name} default {expected!r})")
            continue
        if not _same(expected, actual):
            problems.append(f"{key}: the file has {actual!r}, the dataclass default {group}.{name} is {expected!r}")
    return problems


def render_node() -> str:
    """The ``drkernel:`` node the dataclasses give, as YAML (to paste into the trainer YAML)."""
    import yaml

    from drkernel.verl.config import DEFAULTS

    return yaml.safe_dump({"drkernel": DEFAULTS}, sort_keys=False)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m drkernel.config.check", description=__doc__.split("\n\n")[0])
    parser.add_argument("--print", action="store_true", help="print the drkernel: node the dataclasses give")
    parser.add_argument("--yaml", default=None, help=f"the file to check (default {TRAINER_YAML})")
    args = parser.parse_args(argv)
    if args.print:
        print(render_node(), end="")
        return 0
    problems = check_trainer_yaml(args.yaml)
    for line in problems:
        print(line)
    if problems:
        print(f"{len(problems)} key(s) of {args.yaml or TRAINER_YAML} disagree with the dataclass defaults "
              "(drkernel.config.settings)", file=sys.stderr)
        return 1
    print("the YAML agrees with the dataclass defaults")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
