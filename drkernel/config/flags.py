"""Flat command-line flags for a nested settings dataclass, and back.

A nested config (``TrainConfig.loss.clip_low``, ``TrainConfig.step.mrs.rs_lower``) is offered on
the command line as flat flags (``--clip-low``, ``--mrs-rs-lower``): :func:`flat_fields` lists one
:class:`Flag` per leaf field (its flat name, dotted path, type text, default and the field's
docstring as help), :func:`from_flat` builds the nested dataclass from flat values, and
:func:`flat_values` reads a built one back flat. The flat name of a leaf is its dotted path joined
with ``_``, where

- the class's ``flag_bare_groups`` (a ClassVar tuple) drop their own name: ``loss.clip_low`` ->
  ``clip_low``, ``step.mrs.rs_lower`` -> ``mrs_rs_lower``;
- the class's ``flag_aliases`` (a ClassVar ``{path: flat name}``) name a leaf outright, so older
  flat names keep working: ``step.mrs.enable`` -> ``mrs``, ``agent.max_turns`` -> ``num_turns``.

Fields whose type is a dict, list or tuple (``grader.options``, ``reward.tiers``) are not flags
(:func:`unflagged_fields` lists them); they are set in code or a config file.
"""

from __future__ import annotations

import ast
import dataclasses
import inspect
import textwrap
import typing
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import argparse

__all__ = ["Flag", "argument_parser", "field_docs", "flat_fields", "flat_values", "from_flat", "unflagged_fields"]


@dataclass(frozen=True)
class Flag:
    """One flat flag: ``"--" + name.replace("_", "-")`` sets the leaf field at ``path``."""

    name: str
    """Flat name (the argparse ``dest``), e.g. ``clip_low``."""
    path: str
    """Dotted path of the nested field, e.g. ``loss.clip_low``."""
    type: str
    """The field's annotation as text (``"float | None"``), from which a CLI picks a parser."""
    default: Any
    """The default of the field in its parent's default (``TrainConfig().agent.max_tokens_per_turn``)."""
    help: str
    """The field's docstring, on one line."""


@lru_cache(maxsize=None)
def _class_docs(cls: type) -> dict[str, str]:
    try:
        source = textwrap.dedent(inspect.getsource(cls))
    except (OSError, TypeError):  # no source shipped: no help text
        return {}
    body = ast.parse(source).body[0].body  # type: ignore[attr-defined]
    docs: dict[str, str] = {}
    for node, nxt in zip(body, body[1:]):
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and isinstance(nxt, ast.Expr) \
                and isinstance(getattr(nxt, "value", None), ast.Constant) and isinstance(nxt.value.value, str):
            docs[node.target.id] = " ".join(nxt.value.value.split())
    return docs


def field_docs(cls: type) -> dict[str, str]:
    """Field name -> its docstring (the string right below the field), inherited ones included."""
    docs: dict[str, str] = {}
    for klass in reversed(cls.__mro__):
        if dataclasses.is_dataclass(klass):
            docs.update(_class_docs(klass))
    return docs


def argument_parser(cls: type, description: str | None = None) -> "argparse.ArgumentParser":
    """A parser with one ``--flag`` per field of the flat dataclass ``cls`` (an example's ``Args``):
    ``bool`` fields as ``--x/--no-x``, ``int`` and ``float`` parsed, any other a string; the help is
    the field's docstring (:func:`field_docs`, else its name) with its default.
    ``cls(**vars(parser.parse_args(argv)))`` builds the settings."""
    import argparse

    parser = argparse.ArgumentParser(description=description)
    docs = field_docs(cls)
    for f in dataclasses.fields(cls):
        flag = "--" + f.name.replace("_", "-")
        help_text = f"{docs.get(f.name, f.name.replace('_', ' '))} (default: {f.default})"
        if _type_text(f.type) == "bool":
            parser.add_argument(flag, dest=f.name, action=argparse.BooleanOptionalAction, default=f.default,
                                help=help_text)
        else:
            parser.add_argument(flag, dest=f.name, type={"int": int, "float": float}.get(_type_text(f.type), str),
                                default=f.default, help=help_text)
    return parser


def _type_text(annotation: Any) -> str:
    return annotation if isinstance(annotation, str) else getattr(annotation, "__name__", str(annotation))


def _is_group(hint: Any) -> bool:
    return isinstance(hint, type) and dataclasses.is_dataclass(hint)


def _is_flaggable(type_text: str) -> bool:
    return not any(word in type_text for word in ("dict", "list", "tuple", "Mapping", "Sequence"))


def _leaf_default(cls: type, base: Any, f: dataclasses.Field) -> Any:
    if base is not None:
        return getattr(base, f.name)
    if f.default is not dataclasses.MISSING:
        return f.default
    if f.default_factory is not dataclasses.MISSING:  # type: ignore[misc]
        return f.default_factory()  # type: ignore[misc]
    return None


def _walk(cls: type, base: Any, prefix: tuple[str, ...]) -> Iterator[tuple[tuple[str, ...], dataclasses.Field, Any,
                                                                         type]]:
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        if not f.init:
            continue
        default = _leaf_default(cls, base, f)
        if _is_group(hints.get(f.name)):
            yield from _walk(hints[f.name], default, (*prefix, f.name))
        else:
            yield (*prefix, f.name), f, default, cls


def _flat_name(path: tuple[str, ...], bare: tuple[str, ...], aliases: Mapping[str, str]) -> str:
    dotted = ".".join(path)
    if dotted in aliases:
        return aliases[dotted]
    if len(path) > 1 and path[0] in bare:
        path = path[1:]
    return "_".join(path)


def _rules(cls: type) -> tuple[tuple[str, ...], dict[str, str]]:
    return tuple(getattr(cls, "flag_bare_groups", ())), dict(getattr(cls, "flag_aliases", {}))


def flat_fields(cls: type) -> list[Flag]:
    """One :class:`Flag` per flaggable leaf field of dataclass ``cls``, in field order. Raises if
    two leaves would share a flat name."""
    bare, aliases = _rules(cls)
    out: list[Flag] = []
    seen: dict[str, str] = {}
    for path, f, default, owner in _walk(cls, None, ()):
        type_text = _type_text(f.type)
        if not _is_flaggable(type_text):
            continue
        name = _flat_name(path, bare, aliases)
        dotted = ".".join(path)
        if name in seen:
            raise ValueError(f"flat name {name!r} of {dotted} is already {seen[name]}'s")
        seen[name] = dotted
        out.append(Flag(name=name, path=dotted, type=type_text, default=default,
                        help=field_docs(owner).get(f.name, "")))
    return out


def unflagged_fields(cls: type) -> list[str]:
    """Dotted paths of the leaf fields that are not flags (dict/list/tuple types)."""
    return [".".join(path) for path, f, _, _ in _walk(cls, None, ()) if not _is_flaggable(_type_text(f.type))]


def from_flat(cls: type, values: Mapping[str, Any] | None = None, **kwargs: Any) -> Any:
    """Build dataclass ``cls`` from flat values (:func:`flat_fields` names). A top-level field may
    also be given by its own name (a whole group: ``loss=PolicyLossConfig(...)`` or a mapping of
    its fields). Unknown names raise a ValueError listing the known ones."""
    from drkernel.config.settings import from_plain

    given = {**dict(values or {}), **kwargs}
    paths = {flag.name: flag.path for flag in flat_fields(cls)}
    top = {f.name for f in dataclasses.fields(cls) if f.init}
    nested: dict[str, Any] = {}
    for name, value in given.items():
        if name in paths:
            parts = paths[name].split(".")
        elif name in top:
            parts = [name]
        else:
            raise ValueError(f"unknown setting {name!r} of {cls.__name__}; known: {sorted(set(paths) | top)}")
        node = nested
        for part in parts[:-1]:
            child = node.setdefault(part, {})
            if not isinstance(child, dict):
                raise ValueError(f"{name!r} sets a field of {part!r}, which is also given whole")
            node = child
        if parts[-1] in node and isinstance(node[parts[-1]], dict) and not isinstance(value, Mapping):
            raise ValueError(f"{name!r} is given whole and field by field")
        if isinstance(value, Mapping) and isinstance(node.get(parts[-1]), dict):
            node[parts[-1]].update(value)
        else:
            node[parts[-1]] = value
    return from_plain(cls, nested)


def flat_values(obj: Any) -> dict[str, Any]:
    """Flat name -> value of every flag of a built dataclass (the inverse of :func:`from_flat`)."""
    out: dict[str, Any] = {}
    for flag in flat_fields(type(obj)):
        value: Any = obj
        for part in flag.path.split("."):
            value = getattr(value, part)
        out[flag.name] = value
    return out
