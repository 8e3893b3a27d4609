"""Tests for drkernel/advantages/registry.py."""

from __future__ import annotations

import inspect
from typing import Iterator

import pytest
import torch

import drkernel.advantages as adv_pkg
from drkernel.advantages import registry
from drkernel.advantages.token_level import token_level_advantages
from drkernel.advantages.trloo import trloo_advantages


@pytest.fixture
def scratch_names() -> Iterator[list[str]]:
    """Names registered by a test are removed afterwards so tests stay independent."""
    names: list[str] = []
    yield names
    for name in names:
        registry.ADVANTAGES.unregister(name)


def test_builtins_are_registered() -> None:
    assert {"trloo", "grpo", "rloo"} <= set(adv_pkg.list_advantages())
    assert adv_pkg.get_advantage("trloo") is trloo_advantages
    assert adv_pkg.list_advantages() == sorted(adv_pkg.list_advantages())


def test_unknown_name_lists_known_names() -> None:
    with pytest.raises(KeyError) as err:
        adv_pkg.get_advantage("trlooo")
    assert isinstance(err.value, ValueError)  # also catchable as a bad config value
    message = str(err.value)
    assert "'trlooo'" in message
    for name in ("grpo", "rloo", "trloo"):
        assert repr(name) in message


def test_reregistering_a_taken_name_raises() -> None:
    with pytest.raises(ValueError, match="already registered"):

        @adv_pkg.register_advantage("trloo")
        def impostor(turn_rewards, group_ids, turn_mask=None, gamma=1.0):  # noqa: ANN001
            return turn_rewards

    assert adv_pkg.get_advantage("trloo") is trloo_advantages
    # The same function again (e.g. a module imported twice) is accepted.
    adv_pkg.register_advantage("trloo")(trloo_advantages)


def test_bad_names_raise() -> None:
    for bad in ("", None, 3):
        with pytest.raises(ValueError, match="non-empty string"):
            adv_pkg.register_advantage(bad)  # type: ignore[arg-type]


def test_new_estimator_is_usable_by_name(scratch_names: list[str]) -> None:
    scratch_names.append("test_raw_return")

    @adv_pkg.register_advantage("test_raw_return")
    def raw_return(turn_rewards, group_ids, turn_mask=None, gamma=1.0, *, scale: float = 1.0):  # noqa: ANN001
        # No baseline: A = scale * r (T = 1 here, so G = r).
        return scale * turn_rewards * turn_mask

    assert "test_raw_return" in adv_pkg.list_advantages()
    tok_rewards = torch.tensor([[0.0, 2.0]])
    tok_turn_index = torch.tensor([[0, 0]])
    tok_mask = torch.tensor([[True, True]])
    out = token_level_advantages(tok_rewards, tok_turn_index, tok_mask, [0], estimator="test_raw_return", scale=3.0)
    torch.testing.assert_close(out, torch.tensor([[6.0, 6.0]]))


def test_builtins_share_the_signature() -> None:
    for name in ("trloo", "grpo", "rloo"):
        params = list(inspect.signature(adv_pkg.get_advantage(name)).parameters.values())
        assert [p.name for p in params[:4]] == ["turn_rewards", "group_ids", "turn_mask", "gamma"]
        assert params[2].default is None and params[3].default == 1.0
        for extra in params[4:]:  # knobs: keyword-only with defaults
            assert extra.kind is inspect.Parameter.KEYWORD_ONLY
            assert extra.default is not inspect.Parameter.empty
