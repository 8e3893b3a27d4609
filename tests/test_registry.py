"""Tests for drkernel/_registry.py, and that the three registries built on it behave alike."""

from __future__ import annotations

import importlib
import operator

import pytest

from drkernel._registry import Registry, UnknownNameError


def double(x: int) -> int:
    return 2 * x


def triple(x: int) -> int:
    return 3 * x


def test_register_get_and_list() -> None:
    reg: Registry = Registry("widget")
    assert reg.register("b", double) is double
    deco = reg.decorator("a")
    assert deco(triple) is triple
    assert reg["a"] is triple and reg["b"] is double
    assert reg.names() == ["a", "b"] and list(reg) == ["a", "b"] and len(reg) == 2
    assert "a" in reg and "z" not in reg
    assert reg.get("z") is None  # Mapping.get keeps its meaning
    reg.unregister("a")
    reg.unregister("never-there")
    assert reg.names() == ["b"]


def test_duplicate_with_another_object_names_both() -> None:
    reg: Registry = Registry("widget")
    reg.register("x", double)
    reg.register("x", double)  # the same object again: a no-op
    with pytest.raises(ValueError) as err:
        reg.register("x", triple)
    msg = str(err.value)
    assert "widget 'x' is already registered to" in msg
    assert f"{__name__}.double" in msg and f"{__name__}.triple" in msg
    assert reg["x"] is double


def test_reloaded_definition_is_the_same() -> None:
    reg: Registry = Registry("widget")
    reg.register("x", double)
    ns: dict = {}
    exec(compile("def double(x):\n    return 2 * x\n", "<reload>", "exec"), ns)
    ns["double"].__module__ = __name__  # what importlib.reload produces: a new object, same definition
    reg.register("x", ns["double"])
    assert reg["x"] is ns["double"]


def test_unknown_name_lists_known_names() -> None:
    reg: Registry = Registry("widget")
    with pytest.raises(UnknownNameError, match=r"unknown widget 'q'; known: \(none\)"):
        reg["q"]
    reg.register("beta", double)
    reg.register("alpha", triple)
    with pytest.raises(KeyError) as err:
        reg["q"]
    assert isinstance(err.value, ValueError)
    assert str(err.value) == "unknown widget 'q'; known: 'alpha', 'beta'"  # plain, not KeyError-quoted
    with pytest.raises(UnknownNameError):
        reg[["unhashable"]]  # type: ignore[index]


def test_bad_names_and_custom_equality() -> None:
    reg: Registry = Registry("template", same=operator.eq)
    for bad in ("", None, 3):
        with pytest.raises(ValueError, match="non-empty string"):
            reg.register(bad, "x")  # type: ignore[arg-type]
        with pytest.raises(ValueError, match="non-empty string"):
            reg.decorator(bad)  # type: ignore[arg-type]
    reg.register("t", ("a", "b"))
    reg.register("t", ("a", "b"))  # equal value: fine under operator.eq
    with pytest.raises(ValueError, match="already registered"):
        reg.register("t", ("a", "c"))


@pytest.mark.parametrize("module, lookup, kind", [
    ("drkernel.advantages", "get_advantage", "advantage estimator"),
    ("drkernel.agent.prompts", "get_template", "prompt template"),
    ("drkernel.rewards", "get_reward_fn", "reward function"),
])
def test_the_registries_behave_alike(module: str, lookup: str, kind: str) -> None:
    get = getattr(importlib.import_module(module), lookup)
    with pytest.raises(UnknownNameError) as err:
        get("no-such-name")
    assert isinstance(err.value, KeyError) and isinstance(err.value, ValueError)
    assert str(err.value).startswith(f"unknown {kind} 'no-such-name'; known: '")
